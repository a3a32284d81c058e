package web

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
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
	// StepAside says who asked the holder to step aside, and why
	// (request-release); "" when nobody did.
	StepAside string
	// Mode is "exclusive" or "shared".
	Mode string
	// Holders counts the live grants; the fields above describe the newest.
	Holders int
	// Window is when the lease's hold window (min_hold_ms) ends, while it
	// runs; nil: none. Released: its holder released the key inside it,
	// and nobody holds it until then (Owner and Fence are the released
	// lease's).
	Window   *clock
	Released bool
	// Set is the size of the lock set the holder took the key with (0:
	// a lone grant).
	Set int
}

// holderRow is one holder of a key: a lock's exclusive holder, one of its
// shared holders, or a semaphore's permit. Never its token.
type holderRow struct {
	Owner   string
	Mode    string
	Fence   int64
	Count   int
	TTL     string
	Left    clock // until expiry
	HeldFor clock // since acquisition
	// Value is the grant's value (compact JSON), or "".
	Value string
	// ForceURL confirms breaking this holder only (by its fence).
	ForceURL string
}

// queuedRow is one waiting request, in grant order.
type queuedRow struct {
	Position int // 1 is granted next
	Owner    string
	Mode     string
	Since    clock // when it began to wait
}

// semRow is one live semaphore on the list.
type semRow struct {
	Name    string
	Used    int // permits held: len(Holders)
	Limit   int // 0 when the engine did not say
	Waiting int
	// Soonest is when the first permit expires (Expires false: none held).
	Expires   bool
	Soonest   clock
	DetailURL string
	ForceURL  string
}

// electRow is one election with a leader on the list.
type electRow struct {
	Name   string
	Leader string
	Term   int64 // the leadership's fence
	// Value is the leader's value on one line, cut short; "" without one.
	Value string
	Since clock // how long it has led, since the term began
	Left  clock // until the leadership lapses unless renewed
	TTL   string
	// Candidates counts those waiting to lead.
	Candidates int
	DetailURL  string
	ForceURL   string
}

// listView is a list page: of locks (Rows), semaphores (Sems) or
// elections (Elects).
type listView struct {
	Noun     string // "lock", "semaphore" or "election"
	Action   string // the list page, the filter form's action
	Prefix   string
	Rows     []lockRow
	Sems     []semRow
	Elects   []electRow
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

// termRow is one leadership of an election, read from its history: who
// led, with which term, from when to when, and how it ended.
type termRow struct {
	Leader string
	Term   int64
	// Began is when the term began; BeganKnown is false when the history
	// no longer goes back that far.
	Began      clock
	BeganKnown bool
	// End is how the term ended: "resigned", "expired" or "force-released";
	// "leading" for the current leader's; "" when the history has no end
	// for it. Ended is when it ended; Lasted how long it lasted, when both
	// ends are known.
	End    string
	Badge  string // the end's badge class: the history event's type
	Ended  clock
	Lasted string
	Actor  string // who resigned or broke it
	Reason string // why it was broken
	// Proclaimed are when the leader proclaimed a new value, newest
	// first. The history records when, not the value: only the current
	// value is shown.
	Proclaimed []clock
}

// notice is the outcome of an action, shown on top of a page.
type notice struct {
	OK   bool
	Text string
}

// detailView is the detail page of one lock, semaphore or election, held
// or not. An election's leader is its one holder (Lock), its candidates
// the queue.
type detailView struct {
	// HasValues says some holder has a value: the holders table shows them.
	HasValues bool
	// HasCounts says some holder re-entered (count above 1): only then
	// does the holders table have a Count column, which would otherwise
	// say 1 on every row.
	HasCounts bool
	Key       string // the lock key, the semaphore or election name
	Noun      string // "lock", "semaphore" or "election"
	ListURL   string
	ListLabel string
	Held      bool
	// Single: a lock with one holder, whose lease the state shows whole
	// (Lock). Otherwise the state sums up and Holders has the details.
	Single bool
	Lock   lockRow
	Mode   string
	Limit  int // a semaphore's limit; 0 for a lock or when unknown
	// Holders are the live grants, oldest first; Queue the waiting
	// requests in grant order.
	Holders []holderRow
	Queue   []queuedRow
	// HolderTotal and WaitTotal count every live holder and waiter; the
	// state lists at most lock.StatePage of each.
	HolderTotal, WaitTotal int
	// ForceAllURL confirms breaking every holder.
	ForceAllURL string
	Events      []eventRow
	Updated     clock
	PollURL     string
	LiveURL     string // the event stream of this key
	CanForce    bool
	Notice      *notice
	// Rhythm is the renewal chart; nil before the lease's second renewal.
	Rhythm *rhythm
	// Value is an election's leader's value, indented JSON; "" without
	// one.
	Value string
	// Terms are an election's leaderships from its history, newest first.
	Terms []termRow
	// WindowForceURL confirms ending the hold window that keeps the key
	// after its holder's release (Lock.Released).
	WindowForceURL string
}

// target is what a force-release breaks: the holder with Fence, or
// every holder (All). Neither: the only holder, or a choice among several.
type target struct {
	Fence int64
	All   bool
}

// confirmView is the force-release confirmation form.
type confirmView struct {
	Key       string
	Noun      string
	ListURL   string
	ListLabel string
	Held      bool
	// All breaks every holder (Targets); otherwise Targets is the one
	// holder with Fence.
	All     bool
	Fence   int64
	Targets []holderRow
	// Choose: several holders and none chosen; the page links to each
	// holder's form and to AllURL instead of showing a form.
	Choose bool
	AllURL string
	// Gone is the fence asked for when no holder has it any more.
	Gone int64
	// Window is when the hold window that keeps the key after its
	// holder's release ends (nil: the key is held): breaking it frees
	// the key.
	Window    *clock
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

func detailURL(key string) string { return locks.detailURL(key) }
func forceURL(key string) string  { return locks.forceURL(key) }

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

// newElectListView is the elections page.
func newElectListView(page lock.Page, prefix, cursor string, now time.Time, canForce bool) listView {
	v := newPageView(elections, page, prefix, cursor, now, canForce)
	v.Elects = make([]electRow, 0, len(page.Locks))
	for _, s := range page.Locks {
		v.Elects = append(v.Elects, newElectRow(s))
	}
	return v
}

func newListView(page lock.Page, prefix, cursor string, now time.Time, canForce bool) listView {
	v := newPageView(locks, page, prefix, cursor, now, canForce)
	v.Rows = make([]lockRow, 0, len(page.Locks))
	for _, s := range page.Locks {
		v.Rows = append(v.Rows, newLockRow(s))
	}
	return v
}

// newSemListView is the semaphores page.
func newSemListView(page lock.Page, prefix, cursor string, now time.Time, canForce bool) listView {
	v := newPageView(semaphores, page, prefix, cursor, now, canForce)
	v.Sems = make([]semRow, 0, len(page.Locks))
	for _, s := range page.Locks {
		v.Sems = append(v.Sems, newSemRow(s))
	}
	return v
}

// newPageView is what the lock and semaphore lists share: filter, paging
// and refresh.
func newPageView(k section, page lock.Page, prefix, cursor string, now time.Time, canForce bool) listView {
	base := k.list
	v := listView{
		Noun:     k.noun(),
		Action:   base,
		Prefix:   prefix,
		Updated:  ago(now, now),
		SelfURL:  listURL(base, prefix, cursor),
		PollURL:  listURL(k.fragments, prefix, cursor),
		CanForce: canForce,
	}
	if cursor != "" {
		v.FirstURL = listURL(base, prefix, "")
	}
	if page.NextCursor != "" {
		v.NextURL = listURL(base, prefix, page.NextCursor)
	}
	return v
}

func newSemRow(s lock.State) semRow {
	name := s.Resource.Name
	hs := holdersOf(s, lock.Permit)
	r := semRow{
		Name:      name,
		Used:      len(hs),
		Limit:     s.Limit,
		Waiting:   max(s.Waiters, len(s.Queue)),
		DetailURL: semaphores.detailURL(name),
		ForceURL:  semaphores.forceURL(name),
	}
	if len(hs) > 0 {
		soonest := slices.MinFunc(hs, func(a, b lock.Holder) int { return cmp.Compare(a.Remaining, b.Remaining) })
		r.Expires, r.Soonest = true, left(soonest.ExpiresAt, soonest.Remaining)
	}
	return r
}

func newElectRow(s lock.State) electRow {
	name := s.Resource.Name
	// Redis's clock at the read, as in newLockRow.
	now := s.ExpiresAt.Add(-s.Remaining)
	return electRow{
		Name:       name,
		Leader:     s.Owner,
		Term:       s.Fence,
		Value:      shortValue(s.Value),
		Since:      heldFor(s.AcquiredAt, now),
		Left:       left(s.ExpiresAt, s.Remaining),
		TTL:        leaseSpan(s.TTL),
		Candidates: max(s.Waiters, len(s.Queue)),
		DetailURL:  elections.detailURL(name),
		ForceURL:   elections.forceURL(name),
	}
}

// valueShort is how many characters of a value the elections list shows.
const valueShort = 60

// shortValue is a JSON value on one line, cut to valueShort characters.
func shortValue(v string) string {
	var b bytes.Buffer
	if json.Compact(&b, []byte(v)) == nil {
		v = b.String()
	}
	if r := []rune(v); len(r) > valueShort {
		return string(r[:valueShort-1]) + "…"
	}
	return v
}

// prettyValue is a JSON value indented for reading. The engine only keeps
// valid JSON; anything else is shown as it is.
func prettyValue(v string) string {
	var b bytes.Buffer
	if json.Indent(&b, []byte(v), "", "  ") != nil {
		return v
	}
	return b.String()
}

// newTerms reads an election's leaderships from its history (newest
// first): each event names its term (the fence), so the events of one
// term are its start, its proclaims and its end. leader is the current
// leadership (zero when nobody leads); its term is "leading" even when
// the history no longer holds its start.
func newTerms(events []lock.Event, leader lock.State, now time.Time) []termRow {
	type span struct {
		row          *termRow
		began, ended time.Time
	}
	terms := map[int64]*span{}
	termOf := func(e lock.Event) *span {
		t := terms[e.Fence]
		if t == nil {
			t = &span{row: &termRow{Leader: e.Owner, Term: e.Fence}}
			terms[e.Fence] = t
		}
		return t
	}
	// Oldest first, so that a term's events come in their order.
	for _, e := range slices.Backward(events) {
		if e.Fence == 0 {
			continue
		}
		t := termOf(e)
		switch e.Type {
		case "acquired":
			t.began = e.At
		case "restored":
			// Put back after Redis lost its data: the term goes on, from
			// when it began if that is still known.
			if t.began.IsZero() {
				t.began = e.At
			}
		case "proclaimed":
			t.row.Proclaimed = append([]clock{ago(e.At, now)}, t.row.Proclaimed...)
		case "released":
			// A released event with a count left gave back one re-entry
			// level: the term goes on.
			if e.Count == 0 {
				t.ended, t.row.End, t.row.Badge, t.row.Actor = e.At, "resigned", e.Type, e.Actor
			}
		case "expired":
			t.ended, t.row.End, t.row.Badge = e.At, "expired", e.Type
		case "force_released":
			t.ended, t.row.End, t.row.Badge, t.row.Actor, t.row.Reason = e.At, "force-released", e.Type, e.Actor, e.Reason
		}
	}
	if leader.Fence != 0 {
		t := termOf(lock.Event{Owner: leader.Owner, Fence: leader.Fence})
		if t.began.IsZero() {
			t.began = leader.AcquiredAt
		}
		if t.ended.IsZero() {
			t.row.End, t.row.Badge = "leading", "acquired"
		}
	}
	rows := make([]termRow, 0, len(terms))
	for _, t := range terms {
		r := t.row
		if r.End == "" {
			r.Badge = "unknown"
		}
		if !t.began.IsZero() {
			r.Began, r.BeganKnown = ago(t.began, now), true
		}
		if !t.ended.IsZero() {
			r.Ended = ago(t.ended, now)
			if !t.began.IsZero() {
				r.Lasted = leaseSpan(t.ended.Sub(t.began))
			}
		}
		rows = append(rows, *r)
	}
	// Terms strictly increase: the newest leadership has the highest.
	slices.SortFunc(rows, func(a, b termRow) int { return cmp.Compare(b.Term, a.Term) })
	return rows
}

// holdersOf is s's holders. An engine that does not list them (one
// exclusive holder, described by s's own fields) gets a list of one.
func holdersOf(s lock.State, mode lock.Mode) []lock.Holder {
	if len(s.Holders) > 0 {
		return slices.Clone(s.Holders)
	}
	if (s.Fence == 0 && s.Owner == "") || released(s) {
		return nil
	}
	return []lock.Holder{{
		Owner: s.Owner, Mode: cmp.Or(s.Mode, mode), Fence: s.Fence, Count: s.Count, TTL: s.TTL,
		AcquiredAt: s.AcquiredAt, ExpiresAt: s.ExpiresAt, Remaining: s.Remaining, Value: s.Value,
	}}
}

// released says whether s is a key that a hold window keeps after its
// holder's release: nobody holds it until the window ends.
func released(s lock.State) bool {
	return s.Count == 0 && !s.MinHoldUntil.IsZero()
}

// modeOf is how s is held, for people: "exclusive", "shared" or "permit".
func modeOf(s lock.State, def lock.Mode) string {
	return string(cmp.Or(s.Mode, def))
}

func newHolderRows(k section, name string, s lock.State, def lock.Mode) []holderRow {
	hs := holdersOf(s, def)
	rows := make([]holderRow, 0, len(hs))
	for _, h := range hs {
		// Redis's clock at the read, as in newLockRow.
		now := h.ExpiresAt.Add(-h.Remaining)
		rows = append(rows, holderRow{
			Owner:    h.Owner,
			Mode:     string(cmp.Or(h.Mode, def)),
			Fence:    h.Fence,
			Count:    h.Count,
			TTL:      leaseSpan(h.TTL),
			Left:     left(h.ExpiresAt, h.Remaining),
			HeldFor:  heldFor(h.AcquiredAt, now),
			Value:    h.Value,
			ForceURL: k.holderForceURL(name, h.Fence),
		})
	}
	return rows
}

// newQueuedRows is s's queue; now is this host's clock, used only when
// s has no lease to read Redis's clock from.
func newQueuedRows(s lock.State, def lock.Mode, now time.Time) []queuedRow {
	if !s.ExpiresAt.IsZero() {
		now = s.ExpiresAt.Add(-s.Remaining)
	}
	rows := make([]queuedRow, 0, len(s.Queue))
	for i, q := range s.Queue {
		rows = append(rows, queuedRow{
			Position: i + 1,
			Owner:    q.Owner,
			Mode:     string(cmp.Or(q.Mode, def)),
			Since:    ago(q.WaitingSince, now),
		})
	}
	return rows
}

// defaultMode is the mode of k's grants when the engine does not say.
func (k section) defaultMode() lock.Mode {
	if k.sem() {
		return lock.Permit
	}
	return lock.Exclusive
}

func newLockRow(s lock.State) lockRow {
	// Redis's clock at the read, from the same reply as the times: relative
	// values do not depend on this host's clock agreeing with Redis's.
	now := s.ExpiresAt.Add(-s.Remaining)
	r := lockRow{
		Key:       s.Resource.Name,
		Owner:     s.Owner,
		Fence:     s.Fence,
		Count:     s.Count,
		TTL:       leaseSpan(s.TTL),
		Left:      left(s.ExpiresAt, s.Remaining),
		HeldFor:   heldFor(s.AcquiredAt, now),
		Renewals:  s.Renewals,
		Renewed:   s.Renewals > 0,
		Waiters:   max(s.Waiters, len(s.Queue)),
		AtRisk:    s.AtRisk,
		DetailURL: detailURL(s.Resource.Name),
		ForceURL:  forceURL(s.Resource.Name),
		Mode:      modeOf(s, lock.Exclusive),
		Holders:   max(s.HoldersTotal, len(holdersOf(s, lock.Exclusive))),
		Set:       s.Set,
	}
	if r.Renewed {
		r.LastRenewal = ago(s.RenewedAt, now)
	}
	if !s.MinHoldUntil.IsZero() {
		d := max(s.MinHoldUntil.Sub(now), 0)
		r.Window = &clock{ISO: iso(s.MinHoldUntil), Title: "ends " + absolute(s.MinHoldUntil), Text: leaseSpan(d) + " left",
			Mode: "left", MS: d.Milliseconds()}
		r.Released = released(s)
	}
	if rq := s.ReleaseRequested; rq != nil {
		r.StepAside = "asked to step aside by " + rq.By
		if rq.Reason != "" {
			r.StepAside += ": " + rq.Reason
		}
	}
	return r
}

func newDetailView(key string, st lock.State, held bool, events []lock.Event, now time.Time, canForce bool) detailView {
	return newKindDetailView(locks, key, st, held, events, now, canForce)
}

// newKindDetailView is the detail page of the lock or semaphore name.
func newKindDetailView(k section, name string, st lock.State, held bool, events []lock.Event, now time.Time, canForce bool) detailView {
	def := k.defaultMode()
	v := detailView{
		Key:         name,
		Noun:        k.noun(),
		ListURL:     k.list,
		ListLabel:   k.back,
		Held:        held,
		Mode:        modeOf(st, def),
		Limit:       st.Limit,
		Holders:     []holderRow{},
		Queue:       newQueuedRows(st, def, now),
		WaitTotal:   max(st.Waiters, len(st.Queue)),
		ForceAllURL: k.allForceURL(name),
		Events:      make([]eventRow, 0, len(events)),
		Updated:     ago(now, now),
		PollURL:     k.detailFragmentPath(name),
		LiveURL:     k.eventsURL(name),
		CanForce:    canForce,
	}
	if held {
		v.Lock = newLockRow(st)
		v.Lock.Key, v.Lock.DetailURL, v.Lock.ForceURL = name, k.detailURL(name), k.forceURL(name)
		v.Holders = newHolderRows(k, name, st, def)
		v.HolderTotal = max(st.HoldersTotal, len(v.Holders))
		v.HasValues = slices.ContainsFunc(v.Holders, func(h holderRow) bool { return h.Value != "" })
		v.HasCounts = slices.ContainsFunc(v.Holders, func(h holderRow) bool { return h.Count > 1 })
		v.Single = k.kind == lock.KindLock && len(v.Holders) == 1
		v.WindowForceURL = k.holderForceURL(name, st.Fence)
	}
	if k.elect() {
		var leader lock.State
		if held {
			leader = st
			v.Value = prettyValue(st.Value)
		}
		v.Terms = newTerms(events, leader, now)
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

func newConfirmView(k section, name string, st lock.State, held bool, t target, token, reason, problem string) confirmView {
	v := confirmView{
		Key:       name,
		Noun:      k.noun(),
		ListURL:   k.list,
		ListLabel: k.back,
		Held:      held,
		CSRF:      token,
		Reason:    reason,
		Error:     problem,
		ActionURL: k.forceURL(name),
		DetailURL: k.detailURL(name),
		AllURL:    k.allForceURL(name),
	}
	if !held {
		return v
	}
	holders := newHolderRows(k, name, st, k.defaultMode())
	if released(st) {
		// Nobody holds the key, but it is taken: the released lease's
		// owner and fence name what the person breaks.
		row := newLockRow(st)
		v.Window = row.Window
		holders = []holderRow{{Owner: st.Owner, Mode: string(lock.Exclusive), Fence: st.Fence, TTL: row.TTL, Left: *row.Window,
			HeldFor: row.HeldFor, ForceURL: k.holderForceURL(name, st.Fence)}}
	}
	switch {
	case t.All:
		v.All, v.Targets = true, holders
	case t.Fence != 0:
		i := slices.IndexFunc(holders, func(h holderRow) bool { return h.Fence == t.Fence })
		if i < 0 {
			v.Gone = t.Fence
			v.Targets = holders
			break
		}
		v.Fence, v.Targets = t.Fence, holders[i:i+1]
	case len(holders) == 1:
		v.Fence, v.Targets = holders[0].Fence, holders
	default:
		v.Choose, v.Targets = true, holders
	}
	return v
}

func brokenNotice(k section, key string, b lock.Broken) *notice {
	if k.elect() {
		return &notice{OK: true, Text: fmt.Sprintf("Force-released the leader of %s: the leadership of %s (term %d) is broken; the next candidate in line, if any, leads with a new term.", key, b.Owner, b.Fence)}
	}
	return &notice{OK: true, Text: fmt.Sprintf("Force-released %s: the lease of %s (fence %d) is broken and its waiters were woken.", key, b.Owner, b.Fence)}
}

// notHeldNotice says that what the person confirmed breaking had ended.
func notHeldNotice(k section, name string) *notice {
	if k.elect() {
		return &notice{Text: "Nobody leads " + name + " any more (the leader resigned or its leadership expired meanwhile); nothing was changed."}
	}
	return &notice{Text: name + " was not held any more (released or expired meanwhile); nothing was changed."}
}

// changedHandsNotice says that the lease with fence had ended and that
// others hold name now, so nothing was broken.
func changedHandsNotice(k section, name string, fence int64) *notice {
	switch k.kind {
	case lock.KindSemaphore:
		return &notice{Text: fmt.Sprintf("The %s changed hands; nothing was broken. The lease you confirmed (fence %d) has ended and %s is held by other leases now, shown below. Open Force-release again if one of those is stuck too.", k.noun(), fence, name)}
	case lock.KindElection:
		return &notice{Text: fmt.Sprintf("The leadership changed hands; nothing was broken. The term you confirmed (%d) has ended and %s has another leader now, shown below. Open Force-release again if that one is stuck too.", fence, name)}
	default:
		return &notice{Text: fmt.Sprintf("The lock changed hands; nothing was broken. The lease you confirmed (fence %d) has ended and %s is held by another lease now, shown below. Open Force-release again if that one is stuck too.", fence, name)}
	}
}

func brokenAllNotice(k section, name string) *notice {
	what := "every holder's lease is broken"
	if k.sem() {
		what = "every permit is released"
	}
	return &notice{OK: true, Text: fmt.Sprintf("Force-released %s: %s and its waiters were woken.", name, what)}
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
