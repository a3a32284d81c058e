package web

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
)

// flashCookie carries an action's outcome across the redirect that ends
// the action's POST (post/redirect/get): the page the browser lands on
// shows it once, and a reload there asks for the page again instead of
// resending the form.
const flashCookie = "lockd_flash"

// maxFlashBytes bounds what a flash cookie may hold when read back: the
// longest notice (a force-release with a 200-character key and owner) is
// well under it.
const maxFlashBytes = 2048

// setFlash keeps n for the next page r's browser opens. The cookie is not
// signed: it holds only the text of a notice, which templ escapes, and a
// site that can set cookies for lockd's origin could as well send the
// browser to a page of its own.
func setFlash(w http.ResponseWriter, r *http.Request, n *notice) {
	b, err := json.Marshal(n)
	if err != nil {
		return
	}
	http.SetCookie(w, &http.Cookie{
		Name:     flashCookie,
		Value:    base64.RawURLEncoding.EncodeToString(b),
		Path:     "/",
		MaxAge:   60,
		HttpOnly: true,
		Secure:   secureRequest(r),
		SameSite: http.SameSiteStrictMode,
	})
}

// takeFlash returns the notice left for r's page, if any, and clears it so
// that a reload does not show it again.
func takeFlash(w http.ResponseWriter, r *http.Request) *notice {
	ck, err := r.Cookie(flashCookie)
	if err != nil {
		return nil
	}
	http.SetCookie(w, &http.Cookie{Name: flashCookie, Path: "/", MaxAge: -1, HttpOnly: true,
		Secure: secureRequest(r), SameSite: http.SameSiteStrictMode})
	if len(ck.Value) > maxFlashBytes {
		return nil
	}
	b, err := base64.RawURLEncoding.DecodeString(ck.Value)
	var n notice
	if err != nil || json.Unmarshal(b, &n) != nil || n.Text == "" {
		return nil
	}
	return &n
}
