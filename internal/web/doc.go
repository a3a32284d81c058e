// Package web is lockd's dashboard: server-rendered pages (templ) that show
// live locks, their owners, TTLs and history, and break a stuck lock.
//
// Pages: "/" lists live locks (prefix filter, cursor paging, mode and
// queue length), "/ui/locks/{key}" shows one lock, its holders (one
// exclusive or many shared), its wait queue and its history, and
// "/ui/locks/{key}/force-release" asks for confirmation and breaks one
// holder's lease (?fence=N) or every holder's (?all=1). "/ui/semaphores"
// and "/ui/semaphores/{name}" are the same for semaphores (used/limit,
// permits, queue), "/ui/elections" and "/ui/elections/{name}" for
// elections (the leader, its term and value, the candidates in line, and
// the terms read back from the history): each section asks the engine for
// lock.Resources of its kind, and URLs, prefixes and API-key prefixes use
// the name. Every page is complete HTML, so the read views work with
// JavaScript off; with it on, htmx (embedded, no CDN) re-fetches the table
// every few seconds and app.js keeps relative times ("12 s left") current.
//
// Handlers only call the engine and build plain view structs (views.go);
// templ components (*.templ) render those structs and never see lock
// types. The generated *_templ.go files are committed; a test fails when
// they are stale.
//
// Auth. Without API keys every visitor may force-release, as with the rest
// of the API; the actor recorded in history is "dashboard@<client address>"
// (the TCP peer, so a reverse proxy's address when behind one). With keys,
// RequireLogin puts every page behind "/ui/login": the visitor enters an
// API key, and a signed, expiring session cookie (HttpOnly,
// SameSite=Strict, Secure over HTTPS) remembers the key's name, never the
// key (session.go). Every request re-reads that key's scope and prefixes:
// read views, admin force-releases, a key with prefixes sees only its
// locks, and the actor in history is the key's name.
//
// Caveats. Every form carries a CSRF token (csrf.go). With keys, tokens
// and sessions are signed with the secret given to RequireLogin
// (LOCKD_SESSION_SECRET); without one, and always with auth off, with a
// secret made at start: then a restart ends every session and refuses
// forms opened before it, and replicas do not accept each other's. Signing out clears
// the browser's cookie only; a copied cookie stays valid until it expires,
// its key is removed or replaced, or the secret changes. The force-release
// form names the fence it showed, so a lock that changed hands meanwhile is
// not broken. Times are shown in UTC.
package web

//go:generate go tool templ generate
