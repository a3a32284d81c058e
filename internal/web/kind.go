package web

import (
	"net/url"
	"strconv"

	"github.com/lockd/lockd/internal/lock"
)

// kind is what a page shows: locks or semaphores. Both are engine keys
// with the same holders, queue and history; a semaphore named x is the
// engine key lock.SemaphoreKey(x). URLs, forms and prefixes carry the
// name, validated with lock.ValidKey before it becomes an engine key.
type kind struct {
	sem bool
}

var (
	locks      = kind{}
	semaphores = kind{sem: true}
)

// engineKey is the engine's key for name.
func (k kind) engineKey(name string) string {
	if k.sem {
		return lock.SemaphoreKey(name)
	}
	return name
}

// noun is "lock" or "semaphore".
func (k kind) noun() string {
	if k.sem {
		return "semaphore"
	}
	return "lock"
}

// listPath is the list page.
func (k kind) listPath() string {
	if k.sem {
		return semaphoresPath
	}
	return "/"
}

// listLabel is the breadcrumb back to the list page.
func (k kind) listLabel() string {
	if k.sem {
		return "« All semaphores"
	}
	return "« All locks"
}

// fragmentPath is the list table that htmx re-fetches; a key's detail
// fragment is below it.
func (k kind) fragmentPath() string {
	if k.sem {
		return semFragmentPath
	}
	return listFragmentPath
}

// base is the path the detail pages are under.
func (k kind) base() string {
	if k.sem {
		return semaphoresPath
	}
	return "/ui/locks"
}

// detailURL is the detail page of name.
func (k kind) detailURL(name string) string { return k.base() + "/" + url.PathEscape(name) }

// forceURL is the force-release confirmation of name.
func (k kind) forceURL(name string) string { return k.detailURL(name) + "/force-release" }

// holderForceURL confirms breaking the one holder of name with fence.
func (k kind) holderForceURL(name string, fence int64) string {
	return k.forceURL(name) + "?fence=" + strconv.FormatInt(fence, 10)
}

// allForceURL confirms breaking every holder of name.
func (k kind) allForceURL(name string) string { return k.forceURL(name) + "?all=1" }

// detailFragmentPath is the part of the detail page htmx re-fetches.
func (k kind) detailFragmentPath(name string) string {
	return k.fragmentPath() + "/" + url.PathEscape(name)
}

// eventsURL is the event stream of the keys of this kind under prefix.
func (k kind) eventsURL(prefix string) string {
	if !k.sem {
		return eventsURL(prefix)
	}
	q := url.Values{"kind": {"semaphores"}}
	if prefix != "" {
		q.Set("prefix", prefix)
	}
	return eventsPath + "?" + q.Encode()
}
