// Command webhook-receiver is an example endpoint for lockd's webhooks
// (--webhooks-file): it checks each delivery's Lockd-Signature, ignores a
// delivery it has already seen (by the signed body's id, which the
// Lockd-Event-Id header only copies: delivery is at least once),
// and prints the event. Standard library only; copy what you need.
//
//	LOCKD_WEBHOOK_SECRET=... go run ./examples/webhook-receiver -listen 127.0.0.1:9000
//
// lockd delivers to a loopback or private address only when the webhooks
// file allows it for that endpoint:
//
//	webhooks:
//	  - url: http://127.0.0.1:9000/
//	    secret: "..."          # the same as LOCKD_WEBHOOK_SECRET
//	    allow_private: true    # 127.0.0.1 is this host
package main

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Verify checks header, a Lockd-Signature ("t=<unix seconds>,v1=<hex>"),
// against body: v1 must be HMAC-SHA256(secret, "<t>.<body>"), compared in
// constant time, and t within tolerance of now (a replayed old delivery is
// refused).
func Verify(secret, header string, body []byte, now time.Time, tolerance time.Duration) error {
	var ts string
	var sigs []string
	for _, part := range strings.Split(header, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch k {
		case "t":
			ts = v
		case "v1":
			sigs = append(sigs, v)
		}
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || len(sigs) == 0 {
		return errors.New("malformed Lockd-Signature")
	}
	if d := now.Sub(time.Unix(sec, 0)); d > tolerance || d < -tolerance {
		return errors.New("signature timestamp too old or in the future")
	}
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(ts + "."))
	m.Write(body)
	want := []byte(hex.EncodeToString(m.Sum(nil)))
	for _, s := range sigs {
		if hmac.Equal([]byte(s), want) {
			return nil
		}
	}
	return errors.New("signature does not match")
}

// Event is what lockd sends (never a token).
type Event struct {
	ID     string    `json:"id"`
	Type   string    `json:"type"`
	Key    string    `json:"key"`
	At     time.Time `json:"at"`
	Owner  string    `json:"owner"`
	Fence  int64     `json:"fence"`
	Actor  string    `json:"actor"`
	Reason string    `json:"reason"`
}

// Handler verifies, deduplicates and hands each event to Handle. Seen is
// in memory here; use your database (a table keyed by event ID) in real use.
type Handler struct {
	Secret string
	Handle func(Event)

	mu   sync.Mutex
	seen map[string]bool
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 64<<10))
	if err != nil {
		http.Error(w, "body too large", http.StatusRequestEntityTooLarge)
		return
	}
	if err := Verify(h.Secret, r.Header.Get("Lockd-Signature"), body, time.Now(), 5*time.Minute); err != nil {
		http.Error(w, err.Error(), http.StatusUnauthorized) // not from lockd: lockd retries only 5xx-like failures, this is final for a forger
		return
	}
	var ev Event
	if err := json.Unmarshal(body, &ev); err != nil || ev.ID != r.Header.Get("Lockd-Event-Id") {
		http.Error(w, "bad event", http.StatusBadRequest)
		return
	}
	h.mu.Lock()
	if h.seen == nil {
		h.seen = map[string]bool{}
	}
	dup := h.seen[ev.ID]
	h.seen[ev.ID] = true
	h.mu.Unlock()
	if !dup {
		h.Handle(ev)
	}
	w.WriteHeader(http.StatusNoContent) // any 2xx: delivered
}

func main() {
	listen := flag.String("listen", "127.0.0.1:9000", "address to listen on")
	flag.Parse()
	secret := os.Getenv("LOCKD_WEBHOOK_SECRET")
	if secret == "" {
		log.Fatal("set LOCKD_WEBHOOK_SECRET to the endpoint's secret from the webhooks file")
	}
	h := &Handler{Secret: secret, Handle: func(ev Event) {
		fmt.Printf("%s %s %s owner=%s fence=%d actor=%s reason=%q\n", ev.At.Format(time.RFC3339Nano), ev.Type, ev.Key, ev.Owner, ev.Fence, ev.Actor, ev.Reason)
	}}
	log.Printf("listening on %s", *listen)
	log.Fatal(http.ListenAndServe(*listen, h))
}
