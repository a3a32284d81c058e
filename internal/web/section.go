package web

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/lockd/lockd/internal/lock"
)

// section is the dashboard's pages for one kind of resource: locks,
// semaphores or elections. All have the same holders, queue and history
// (an election's one holder is its leader, its queue the candidates).
// URLs, forms and prefixes carry the name, validated with lock.ValidKey
// before it becomes a lock.Resource.
type section struct {
	kind lock.Kind
	// list is the list page, fragments the list table that htmx
	// re-fetches (a name's detail fragment is below it) and base the path
	// the detail pages are under.
	list, fragments, base string
	// back is the breadcrumb back to the list page.
	back string
	// live is the ?kind= of the section's event stream; "" for locks, the
	// stream's default.
	live string
}

var (
	locks = section{kind: lock.KindLock, list: "/", fragments: listFragmentPath, base: "/ui/locks",
		back: "« All locks"}
	semaphores = section{kind: lock.KindSemaphore, list: semaphoresPath, fragments: semFragmentPath, base: semaphoresPath,
		back: "« All semaphores", live: "semaphores"}
	elections = section{kind: lock.KindElection, list: electionsPath, fragments: electFragmentPath, base: electionsPath,
		back: "« All elections", live: "elections"}
)

// sections are every section, in the order of the routes.
var sections = []section{locks, semaphores, elections}

// sectionOf is the section whose pages r asks for.
func sectionOf(r *http.Request) section {
	p := r.URL.Path
	for _, k := range []section{semaphores, elections} {
		if under(p, k.base) || under(p, k.fragments) {
			return k
		}
	}
	return locks
}

// under says whether path is base or below it.
func under(path, base string) bool {
	return path == base || strings.HasPrefix(path, base+"/")
}

// sem says whether the section is the semaphores'.
func (k section) sem() bool { return k.kind == lock.KindSemaphore }

// elect says whether the section is the elections'.
func (k section) elect() bool { return k.kind == lock.KindElection }

// resource is the resource called name.
func (k section) resource(name string) lock.Resource {
	return lock.Resource{Kind: k.kind, Name: name}
}

// noun is "lock", "semaphore" or "election".
func (k section) noun() string { return k.kind.String() }

// detailURL is the detail page of name.
func (k section) detailURL(name string) string { return k.base + "/" + url.PathEscape(name) }

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
	return k.fragments + "/" + url.PathEscape(name)
}

// eventsURL is the event stream of the keys of this kind under prefix.
func (k section) eventsURL(prefix string) string {
	if k.live == "" {
		return eventsURL(prefix)
	}
	q := url.Values{"kind": {k.live}}
	if prefix != "" {
		q.Set("prefix", prefix)
	}
	return eventsPath + "?" + q.Encode()
}

// KindOf is the kind of resource a dashboard page's {key} names: the kind
// of the section the page is in.
func (d *Dashboard) KindOf(r *http.Request) lock.Kind { return sectionOf(r).kind }
