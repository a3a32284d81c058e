package web

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/lockd/lockd/internal/lock"
)

// section is the dashboard's pages for one kind of resource: locks or
// semaphores. Both have the same holders, queue and history. URLs, forms
// and prefixes carry the name, validated with lock.ValidKey before it
// becomes a lock.Resource.
type section struct {
	kind lock.Kind
}

var (
	locks      = section{kind: lock.KindLock}
	semaphores = section{kind: lock.KindSemaphore}
)

// sectionOf is the section whose pages r asks for.
func sectionOf(r *http.Request) section {
	if p := r.URL.Path; strings.HasPrefix(p, semaphoresPath) || strings.HasPrefix(p, semFragmentPath) {
		return semaphores
	}
	return locks
}

// sem says whether the section is the semaphores'.
func (k section) sem() bool { return k.kind == lock.KindSemaphore }

// resource is the resource called name.
func (k section) resource(name string) lock.Resource {
	return lock.Resource{Kind: k.kind, Name: name}
}

// noun is "lock" or "semaphore".
func (k section) noun() string { return k.kind.String() }

// listPath is the list page.
func (k section) listPath() string {
	if k.sem() {
		return semaphoresPath
	}
	return "/"
}

// listLabel is the breadcrumb back to the list page.
func (k section) listLabel() string {
	if k.sem() {
		return "« All semaphores"
	}
	return "« All locks"
}

// fragmentPath is the list table that htmx re-fetches; a key's detail
// fragment is below it.
func (k section) fragmentPath() string {
	if k.sem() {
		return semFragmentPath
	}
	return listFragmentPath
}

// base is the path the detail pages are under.
func (k section) base() string {
	if k.sem() {
		return semaphoresPath
	}
	return "/ui/locks"
}

// detailURL is the detail page of name.
func (k section) detailURL(name string) string { return k.base() + "/" + url.PathEscape(name) }

// forceURL is the force-release confirmation of name.
func (k section) forceURL(name string) string { return k.detailURL(name) + "/force-release" }

// holderForceURL confirms breaking the one holder of name with fence.
func (k section) holderForceURL(name string, fence int64) string {
	return k.forceURL(name) + "?fence=" + strconv.FormatInt(fence, 10)
}

// allForceURL confirms breaking every holder of name.
func (k section) allForceURL(name string) string { return k.forceURL(name) + "?all=1" }

// detailFragmentPath is the part of the detail page htmx re-fetches.
func (k section) detailFragmentPath(name string) string {
	return k.fragmentPath() + "/" + url.PathEscape(name)
}

// eventsURL is the event stream of the keys of this kind under prefix.
func (k section) eventsURL(prefix string) string {
	if !k.sem() {
		return eventsURL(prefix)
	}
	q := url.Values{"kind": {"semaphores"}}
	if prefix != "" {
		q.Set("prefix", prefix)
	}
	return eventsPath + "?" + q.Encode()
}
