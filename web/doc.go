// Package web is lockd's dashboard: server-rendered pages (templ) that show
// live locks, their owners, TTLs and history, and break a stuck lock.
//
// Pages: "/" lists live locks (prefix filter, cursor paging),
// "/ui/locks/{key}" shows one lock and its history, and
// "/ui/locks/{key}/force-release" asks for confirmation and breaks the
// lease. Every page is complete HTML, so the read views work with
// JavaScript off; with it on, htmx (embedded, no CDN) re-fetches the table
// every few seconds and app.js keeps relative times ("12 s left") current.
//
// Handlers only call the engine and build plain view structs (views.go);
// templ components (*.templ) render those structs and never see lock
// types. The generated *_templ.go files are committed; a test fails when
// they are stale.
//
// Caveats. Without auth every visitor may force-release, as with the rest
// of the API; the actor recorded in history is "dashboard@<client address>"
// (the TCP peer, so a reverse proxy's address when behind one). An auth
// layer plugs in with SetIdentify. CSRF tokens are signed with a secret made
// at start, so a force-release form opened before a restart is refused and
// must be reloaded. Times are shown in UTC.
package web

//go:generate go tool templ generate
