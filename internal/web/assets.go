package web

import (
	"embed"
	"io/fs"
	"net/http"
	"strings"
)

// assetFS holds the dashboard's static files, embedded so the binary needs
// no CDN and no files on disk. htmx.min.js is htmx.org 2.0.11 from npm
// (`npm pack htmx.org@2.0.11`, dist/htmx.min.js, BSD-2-Clause: htmx.LICENSE).
//
//go:embed assets
var assetFS embed.FS

// assetsPath is where the assets are served.
const assetsPath = "/ui/assets/"

// assets serves the embedded files. They carry no version in their names,
// so browsers revalidate them (no-cache) rather than keep a stale copy
// after an upgrade.
func assets() http.Handler {
	sub, err := fs.Sub(assetFS, "assets")
	if err != nil {
		panic(err) // the embed directive guarantees the directory
	}
	files := http.StripPrefix(assetsPath, http.FileServerFS(sub))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/") {
			http.NotFound(w, r) // no directory listings
			return
		}
		w.Header().Set("Cache-Control", "no-cache")
		files.ServeHTTP(w, r)
	})
}
