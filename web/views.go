package web

import (
	"fmt"
	"net/url"
	"time"

	"github.com/lockd/lockd/internal/lock"
)

// The view structs below are all the templates see: plain strings and
// numbers, already formatted, never lock types (and never a token, which
// lock.State does not have).

// clock is a moment shown relative ("12 s left", "3 min ago") with its
// absolute time on hover, rendered as <time datetime title>. With
// JavaScript on, app.js keeps Text current from Mode and MS.
type clock struct {
	ISO   string // datetime attribute: RFC 3339 UTC
	Title string // hover text: absolute UTC time
	Text  string // relative text at render time
	Mode  string // "left" counts down, "ago" and "for" count up, "" stays
	MS    int64  // ms left ("left") or elapsed ("ago", "for") at render
}

// lockRow is one live lock.
type lockRow struct {
	Key         string
	Owner       string
	Fence       int64
	Count       int
	TTL         string
	Left        clock // until expiry
	HeldFor     clock // since acquisition
	Renewals    int64
	Renewed     bool  // false: LastRenewal is empty
	LastRenewal clock // since the last renewal
	Waiters     int
	DetailURL   string
	ForceURL    string
	// AtRisk: the last renewal came late, or the lease is running out.
	AtRisk bool
}

// listView is the list page.
type listView struct {
	Prefix   string
	Rows     []lockRow
	Updated  clock
	SelfURL  string // this page, for the no-JS refresh link
	PollURL  string // the table fragment htmx re-fetches
	FirstURL string // empty on the first page
	NextURL  string // empty on the last page
	CanForce bool
	Limited  []string // the signed-in key's prefixes; empty: every key
	Error    string   // a bad prefix: shown instead of the table
}

// eventRow is one history event.
type eventRow struct {
	Type   string
	At     clock
	Owner  string
	Fence  int64
	TTL    string
	Count  int
	Actor  string
	Reason string
}

// notice is the outcome of an action, shown on top of a page.
type notice struct {
	OK   bool
	Text string
}

// detailView is the detail page of one key, held or not.
type detailView struct {
	Key      string
	Held     bool
	Lock     lockRow
	Events   []eventRow
	Updated  clock
	PollURL  string
	CanForce bool
	Notice   *notice
	// Rhythm is the renewal chart; nil before the lease's second renewal.
	Rhythm *rhythm
}

// confirmView is the force-release confirmation form.
type confirmView struct {
	Key       string
	Held      bool
	Lock      lockRow
	CSRF      string
	Reason    string
	Error     string
	ActionURL string
	DetailURL string
}

// loginView is the sign-in form.
type loginView struct {
	CSRF  string
	Next  string // where to go after signing in: a local path
	Error string
}

// problemView is an error page.
type problemView struct {
	Status int
	Title  string
	Detail string
}

func detailURL(key string) string { return "/ui/locks/" + url.PathEscape(key) }
func forceURL(key string) string  { return detailURL(key) + "/force-release" }

func detailFragmentPath(key string) string { return listFragmentPath + "/" + url.PathEscape(key) }

// listURL is the list page (or its fragment, on base) for a prefix and cursor.
func listURL(base, prefix, cursor string) string {
	q := url.Values{}
	if prefix != "" {
		q.Set("prefix", prefix)
	}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	if len(q) == 0 {
		return base
	}
	return base + "?" + q.Encode()
}

func newListView(page lock.Page, prefix, cursor string, now time.Time, canForce bool) listView {
	v := listView{
		Prefix:   prefix,
		Rows:     make([]lockRow, 0, len(page.Locks)),
		Updated:  ago(now, now),
		SelfURL:  listURL("/", prefix, cursor),
		PollURL:  listURL(listFragmentPath, prefix, cursor),
		CanForce: canForce,
	}
	for _, s := range page.Locks {
		v.Rows = append(v.Rows, newLockRow(s))
	}
	if cursor != "" {
		v.FirstURL = listURL("/", prefix, "")
	}
	if page.NextCursor != "" {
		v.NextURL = listURL("/", prefix, page.NextCursor)
	}
	return v
}

func newLockRow(s lock.State) lockRow {
	// Redis's clock at the read, from the same reply as the times: relative
	// values do not depend on this host's clock agreeing with Redis's.
	now := s.ExpiresAt.Add(-s.Remaining)
	r := lockRow{
		Key:       s.Key,
		Owner:     s.Owner,
		Fence:     s.Fence,
		Count:     s.Count,
		TTL:       leaseSpan(s.TTL),
		Left:      left(s.ExpiresAt, s.Remaining),
		HeldFor:   heldFor(s.AcquiredAt, now),
		Renewals:  s.Renewals,
		Renewed:   s.Renewals > 0,
		Waiters:   s.Waiters,
		AtRisk:    s.AtRisk,
		DetailURL: detailURL(s.Key),
		ForceURL:  forceURL(s.Key),
	}
	if r.Renewed {
		r.LastRenewal = ago(s.RenewedAt, now)
	}
	return r
}

func newDetailView(key string, st lock.State, held bool, events []lock.Event, now time.Time, canForce bool) detailView {
	v := detailView{
		Key:      key,
		Held:     held,
		Events:   make([]eventRow, 0, len(events)),
		Updated:  ago(now, now),
		PollURL:  detailFragmentPath(key),
		CanForce: canForce,
	}
	if held {
		v.Lock = newLockRow(st)
	}
	for _, e := range events {
		v.Events = append(v.Events, eventRow{
			Type:   e.Type,
			At:     ago(e.At, now),
			Owner:  e.Owner,
			Fence:  e.Fence,
			TTL:    leaseSpan(e.TTL),
			Count:  e.Count,
			Actor:  e.Actor,
			Reason: e.Reason,
		})
	}
	return v
}

func newConfirmView(key string, st lock.State, held bool, token, reason, problem string) confirmView {
	v := confirmView{
		Key:       key,
		Held:      held,
		CSRF:      token,
		Reason:    reason,
		Error:     problem,
		ActionURL: forceURL(key),
		DetailURL: detailURL(key),
	}
	if held {
		v.Lock = newLockRow(st)
	}
	return v
}

func brokenNotice(key string, b lock.Broken) *notice {
	return &notice{OK: true, Text: fmt.Sprintf("Force-released %s: the lease of %s (fence %d) is broken and its waiters were woken.", key, b.Owner, b.Fence)}
}

func left(at time.Time, remaining time.Duration) clock {
	return clock{ISO: iso(at), Title: "expires " + absolute(at), Text: leaseSpan(remaining) + " left", Mode: "left", MS: remaining.Milliseconds()}
}

func heldFor(since, now time.Time) clock {
	d := max(now.Sub(since), 0)
	return clock{ISO: iso(since), Title: "since " + absolute(since), Text: span(d), Mode: "for", MS: d.Milliseconds()}
}

func ago(at, now time.Time) clock {
	d := max(now.Sub(at), 0)
	return clock{ISO: iso(at), Title: absolute(at), Text: span(d) + " ago", Mode: "ago", MS: d.Milliseconds()}
}

func iso(t time.Time) string      { return t.UTC().Format("2006-01-02T15:04:05.000Z07:00") }
func absolute(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05 MST") }

// leaseSpan is a lease's TTL or time left: span, but under a second in
// milliseconds, so that a 900 ms lease is neither "0 s" nor "expired".
// app.js formats the same way.
func leaseSpan(d time.Duration) string {
	if d < time.Second {
		return fmt.Sprintf("%d ms", max(d, 0).Milliseconds())
	}
	return span(d)
}

// span is a duration for people: "12 s", "3 min 4 s", "2 h", "3 d 4 h".
// app.js formats the same way.
func span(d time.Duration) string {
	s := int64(d / time.Second)
	switch {
	case d < 0:
		return "0 s"
	case s < 60:
		return fmt.Sprintf("%d s", s)
	case s < 3600:
		return pair(s/60, "min", s%60, "s")
	case s < 86400:
		return pair(s/3600, "h", s%3600/60, "min")
	default:
		return pair(s/86400, "d", s%86400/3600, "h")
	}
}

// pair is "3 min 4 s", or "3 min" when the smaller unit is zero.
func pair(big int64, bigUnit string, small int64, smallUnit string) string {
	if small == 0 {
		return fmt.Sprintf("%d %s", big, bigUnit)
	}
	return fmt.Sprintf("%d %s %d %s", big, bigUnit, small, smallUnit)
}
