package lock

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockd/lockd/internal/lock/store"
	"github.com/lockd/lockd/internal/lock/wait"
)

// A lock set takes several locks all or nothing, with one token
// (scripts/lockset.lua, exclusive.set_try):
//
//   - Its keys are taken in one order, the same for every set: by Cluster
//     slot, then by name. A set waits on one key at a time, first in that
//     key's queue, and moves to the next only once it is first on this one
//     and the key is free. Two sets thus never wait for each other in a
//     ring ({a, b} and {b, a} both complete), and a set queued on a key is
//     served in its turn like any waiter (single-key traffic cannot pass
//     it).
//   - While it waits, a set holds nothing: its places in the queues are
//     waiters, which no release hands a key to (exclusive.hand_off). Its
//     keys that share a slot (all of them on one server or Sentinel) are
//     granted in one script call; on a Cluster the slots' calls follow
//     each other once the set is first on every key.
//   - Its places live with this process's liveness (queue.lua): a lockd
//     killed while a set waits leaves nothing queued past aliveFor, and
//     nothing held past the set's TTL.
//   - The set's keys are kept under a hash of its token (setRecordKey),
//     with the set's TTL, so that renew and release need the token alone.

// MinSetKeys and MaxSetKeys bound the keys of a lock set.
const (
	MinSetKeys = 2
	MaxSetKeys = 64
)

// SetRequest asks for a lock set.
type SetRequest struct {
	// Keys are the locks, 2 … 64 distinct ones, in any order.
	Keys  []string
	Owner string
	TTL   time.Duration
	// Wait is how long to wait while a key is held; 0 tries once.
	Wait time.Duration
	// Actor is who asks, for history.
	Actor string
	// Mode is Exclusive (the default, "") or Shared: every key held
	// shared, beside other shared holders.
	Mode Mode
	// Value is each grant's value (compact JSON), or "".
	Value string
	// Session binds every key of the set to the session with this id
	// (lockset_session.go), as AcquireRequest.Session binds one grant:
	// TTL is then the session's time left, and an empty Owner the
	// session's owner.
	Session string
	// SessionScope is the scope Session was made in (CreateSession).
	SessionScope string

	sessionHandle string // the session's handle, once looked up
}

// SetLease is a lock set: every key held with one token.
type SetLease struct {
	Token      string
	Owner      string
	TTL        time.Duration
	AcquiredAt time.Time
	ExpiresAt  time.Time
	// Leases are the keys' grants, in the order the request named them.
	Leases []SetKey
	// Proof is the holder's evidence of the set (lockset_proof.go), as a
	// Lease's Proof is of one lease; "" without Options.Proofs.
	Proof string
	// InSession says the set is bound to a session: it lives as long as
	// the session, whose renewals alone move its expiry.
	InSession bool
}

// SetKey is one key of a lock set and its fence.
type SetKey struct {
	Key   string
	Fence int64
}

// SetInputError says what is wrong with a lock set's request: Field names
// it as the API does ("keys", "keys[3]", "mode", "session").
type SetInputError struct {
	Field  string
	Reason string
}

func (e *SetInputError) Error() string { return "lock: lock set: " + e.Field + ": " + e.Reason }

// ErrNoLockSets is Redlock's ErrUnsupported for lock sets.
var ErrNoLockSets = fmt.Errorf("%w: Redlock has no lock sets", ErrUnsupported)

// CheckSet refuses a request that is not a lock set lockd can take: a
// *SetInputError naming the field.
func CheckSet(req SetRequest) error {
	if n := len(req.Keys); n < MinSetKeys || n > MaxSetKeys {
		return &SetInputError{Field: "keys", Reason: fmt.Sprintf("a lock set has %d … %d keys, not %d", MinSetKeys, MaxSetKeys, n)}
	}
	seen := make(map[string]int, len(req.Keys))
	for i, k := range req.Keys {
		field := "keys[" + strconv.Itoa(i) + "]"
		if !ValidKey(k) {
			return &SetInputError{Field: field, Reason: "not a valid key"}
		}
		if j, ok := seen[k]; ok {
			return &SetInputError{Field: field, Reason: fmt.Sprintf("%q is keys[%d] too", k, j)}
		}
		seen[k] = i
	}
	if req.Mode != "" && req.Mode != Exclusive && req.Mode != Shared {
		return &SetInputError{Field: "mode", Reason: fmt.Sprintf("mode must be exclusive or shared, not %q", req.Mode)}
	}
	if req.TTL <= 0 && req.Session == "" {
		return &SetInputError{Field: "ttl_ms", Reason: "must be positive"}
	}
	return nil
}

// setGroup is the keys of a set that share a slot (the one bucket on a
// server or Sentinel), in the set's order, and the script call's keys.
type setGroup struct {
	sh   *sharedKeys
	keys []string
	call []string
}

// setGroups orders keys as every set does (by slot, then by name) and
// groups them by slot.
func (n *node) setGroups(keys []string) []setGroup {
	sorted := slices.Clone(keys)
	slot := func(k string) int {
		if n.slotShared == nil {
			return 0
		}
		return store.SlotOf(k)
	}
	slices.SortFunc(sorted, func(a, b string) int {
		return cmp.Or(cmp.Compare(slot(a), slot(b)), cmp.Compare(a, b))
	})
	var groups []setGroup
	for i, k := range sorted {
		if i == 0 || slot(k) != slot(sorted[i-1]) {
			sh := n.sharedOf(k)
			groups = append(groups, setGroup{sh: sh, call: []string{sh.epoch, sh.expiries, sh.events, sh.replicas}})
		}
		g := &groups[len(groups)-1]
		ks := keysOf(k)
		g.keys = append(g.keys, k)
		g.call = append(g.call, ks.lease, ks.hist, ks.queue, ks.qinfo, ks.holders)
	}
	return groups
}

// setTry is one lock set's acquire under way.
type setTry struct {
	req      SetRequest
	token    string
	waiter   string            // its id in every key's queue; "" when it does not queue (one slot, no wait)
	entries  map[string]*entry // its place in each key's queue
	deadline time.Time
	groups   []setGroup
	// granting: a grant may have been written, so an acquire that fails
	// gives the keys back. sent is when the first call that may grant was
	// sent: no grant of the set is earlier (the ledger's expiry).
	granting bool
	sent     time.Time
	// rec is the id of the set's record while it gathers keys in several
	// slots (lockset_gather.go); "" for a set in one slot.
	rec string
}

// mode is the scripts' mode of the set: "x" or "s".
func (s *setTry) mode() string {
	if s.req.Mode == Shared {
		return "s"
	}
	return "x"
}

// setAnswer is what one call of lockset.lua said.
type setAnswer struct {
	status string // "granted", "reserved" or "refused"
	fences []int64
	now    time.Time
	key    string // refused: the key
	err    error  // refused: its refusal, as a lone acquire's
}

// trySet runs lockset.lua on one group.
func (n *node) trySet(ctx context.Context, s *setTry, g setGroup, intent string) (setAnswer, error) {
	ctx, cancel := n.bound(ctx)
	defer cancel()
	seen, least := n.epochArgs(g.sh)
	var deadline any = ""
	if s.waiter != "" {
		deadline = (time.Until(s.deadline) + entrySlack).Milliseconds()
	}
	argv := trimmed([]any{s.token, packable(s.req.Owner), s.req.TTL.Milliseconds(), packable(s.req.Actor), intent, seen, n.id,
		strconv.FormatInt(least, 10) + " " + n.newEpochID(), s.waiter, deadline,
		strconv.Itoa(len(s.req.Keys)), s.mode(), traceOf(ctx), s.req.Value, s.req.sessionHandle, s.rec, markFor(s.rec, n.gatherFor())})
	v, err := n.write(ctx, n.scripts.lockset, g.call, argv...)
	if errors.Is(err, errNoAcks) {
		// Too few replicas have the grant: a failover could lose it while
		// its holder works. The caller gives the set back.
		return setAnswer{}, wrap("lock set", errNoAcks)
	}
	if err != nil {
		return setAnswer{}, wrap("lock set", err)
	}
	r, err := newReply(v)
	if err != nil {
		return setAnswer{}, err
	}
	a := setAnswer{status: r.str(0)}
	switch a.status {
	case "granted", "reserved":
		a.now = r.time(1)
		if epoch := r.str(2); epoch != "" {
			n.saw(g.sh, epoch)
		}
		for i := 3; i < r.len(); i++ {
			a.fences = append(a.fences, r.int(i))
		}
		return a, r.err
	case "refused":
		i := int(r.int(1))
		if r.err != nil || i < 1 || i > len(g.keys) {
			return setAnswer{}, fmt.Errorf("lock: lock set script refused key %d of %d", i, len(g.keys))
		}
		a.key = g.keys[i-1]
		sub := &reply{vals: r.vals[2:]}
		status := acquireStatuses[sub.str(0)]
		if status == nil {
			return setAnswer{}, fmt.Errorf("lock: lock set script said %q", sub.str(0))
		}
		answer := status(sub, acquireCall{mode: s.mode()})
		if sub.err != nil {
			return setAnswer{}, sub.err
		}
		_, a.err = answer(ctx, n, acquireTry{key: a.key, en: s.entries[a.key], sh: g.sh})
		return a, nil
	}
	return setAnswer{}, fmt.Errorf("lock: lock set script said %q", a.status)
}

// AcquireSet takes every key of req.Keys or none: a key that is not free
// answers its refusal (a *HeldError, *QueuedError, *DelayError, … naming
// that key), with none of the set's keys taken. With req.Wait > 0 it
// waits, first in each key's queue in turn, holding none of them until it
// holds all.
func (e *Engine) AcquireSet(ctx context.Context, req SetRequest) (SetLease, error) {
	if err := CheckSet(req); err != nil {
		return SetLease{}, err
	}
	if req.Session != "" && req.sessionHandle == "" {
		return e.acquireSetInSession(ctx, req)
	}
	token, err := newToken()
	if err != nil {
		return SetLease{}, err
	}
	s := &setTry{req: req, token: token, deadline: time.Now().Add(req.Wait), groups: e.n.setGroups(req.Keys)}
	// A set in several slots queues first on the keys of the slots before
	// the last even when it does not wait, or a lone acquire could take
	// one of them between that slot's call and the grant.
	if req.Wait > 0 || len(s.groups) > 1 {
		en, err := newEntry(req.Wait)
		if err != nil {
			return SetLease{}, err
		}
		s.waiter, s.entries = en.id, make(map[string]*entry, len(req.Keys))
		for _, k := range req.Keys {
			s.entries[k] = &entry{id: en.id, wait: req.Wait}
		}
	}
	l, err := e.acquireSet(ctx, s)
	if err != nil {
		e.abandonSet(s)
		return SetLease{}, err
	}
	l.Proof = e.n.opts.Proofs.grantedSetProof(l, s.mode(), req.Value)
	return l, nil
}

// acquireSet takes the set's groups in order: each but the last is
// reserved (the set first on all its keys), the last granted, then the
// others.
func (e *Engine) acquireSet(ctx context.Context, s *setTry) (SetLease, error) {
	var alive sync.Once
	stopAlive := make(chan struct{})
	defer close(stopAlive)
	last := len(s.groups) - 1
	for g := 0; g <= last; {
		intent := "reserve"
		if g == last {
			intent = "grant"
			if last > 0 {
				// Granted slot by slot: the record says the set gathers
				// until every slot has granted.
				s.rec = recordID(s.token)
				if err := e.n.writeGathering(ctx, s); err != nil {
					return SetLease{}, err
				}
			}
			s.granting, s.sent = true, time.Now()
		}
		a, err := e.n.trySet(ctx, s, s.groups[g], intent)
		if err == nil && a.status == "refused" {
			err = a.err
		}
		if err == nil {
			if a.status == "reserved" {
				g++
				continue
			}
			return e.grantSet(ctx, s, a)
		}
		if s.req.Wait <= 0 || !waitable(err) || errors.Is(err, errEnded) || !time.Now().Before(s.deadline) {
			return SetLease{}, err
		}
		// The set's places in the queues of its keys in other buckets
		// than the one it waits on live while this process says so.
		alive.Do(func() { go e.keepSetAlive(s, stopAlive) })
		key := a.key
		if key == "" {
			// Redis did not answer (or is recovering): the hub retries
			// with backoff, from the group's first key.
			key = s.groups[g].keys[0]
		}
		if err := e.waitSet(ctx, s, s.groups[g], key); err != nil {
			return SetLease{}, err
		}
	}
	return SetLease{}, errors.New("lock: lock set has no keys")
}

// waitSet waits in the hub on key, the one the set was refused, until a
// try of the set's group is no longer refused it: granted, reserved, or
// refused another key (the caller tries again). Its error is the last
// refusal when the wait ends. The hub tries once at once: the key's
// release may have come between the caller's try, which learnt which key
// to wait on, and the Watch.
func (e *Engine) waitSet(ctx context.Context, s *setTry, g setGroup, key string) error {
	seen := e.hub.Watch(key, "")
	_, err := e.hub.Wait(ctx, key, s.deadline, wait.Waiter[Lease]{
		Try: func(ctx context.Context) (Lease, error) {
			a, err := e.n.trySet(ctx, s, g, "reserve")
			if err == nil && a.status == "refused" && a.key == key {
				return Lease{}, a.err
			}
			if err != nil && !waitable(err) {
				return Lease{}, err
			}
			// Moved on: the caller's next try says where to.
			return Lease{ExpiresAt: time.Now()}, nil
		},
		Undo:  func(Lease) {},
		ID:    s.waiter,
		Place: s.entries[key].placed,
	}, seen, nil)
	return fromHub(err)
}

// keepSetAlive says in Redis that this process is alive for every bucket
// of the set's keys while it waits: the hub does so for the key it waits
// on, not for the keys the set is already first on.
func (e *Engine) keepSetAlive(s *setTry, stop <-chan struct{}) {
	t := time.NewTicker(aliveEvery)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-e.stop:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), e.n.opts.CallTimeout)
			_ = e.n.alive(ctx, s.req.Keys)
			cancel()
		}
	}
}

// grantSet finishes a set whose last group was granted (a): the other
// groups, on which the set is first, are granted now; then the set's
// record is written.
func (e *Engine) grantSet(ctx context.Context, s *setTry, a setAnswer) (SetLease, error) {
	fences := map[string]int64{}
	put := func(g setGroup, a setAnswer) {
		for i, k := range g.keys {
			if i < len(a.fences) {
				fences[k] = a.fences[i]
			}
		}
	}
	last := len(s.groups) - 1
	put(s.groups[last], a)
	acquired := a.now
	if e.gathered != nil {
		e.gathered(s.req.Keys)
	}
	// The other slots' calls at once: the moment between the first
	// slot's grant and the last one's is as short as one round trip.
	answers := make([]setAnswer, last)
	errs := make([]error, last)
	var wg sync.WaitGroup
	for g := range last {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b, err := e.n.trySet(ctx, s, s.groups[g], "grant")
			if err == nil && b.status != "granted" {
				err = cmp.Or(b.err, fmt.Errorf("lock: lock set: %s answered %q", b.key, b.status))
			}
			answers[g], errs[g] = b, err
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return SetLease{}, err
	}
	for g, b := range answers {
		put(s.groups[g], b)
	}
	l := SetLease{Token: s.token, Owner: s.req.Owner, TTL: s.req.TTL, AcquiredAt: acquired, ExpiresAt: acquired.Add(s.req.TTL)}
	for _, k := range s.req.Keys {
		l.Leases = append(l.Leases, SetKey{Key: k, Fence: fences[k]})
		// Each key's grant is an ordinary lease: Redis losing its data
		// puts it back as any other (restore.go).
		e.n.noted(k)
		e.n.ledger.note(k, Lease{Resource: Lock(k), Owner: s.req.Owner, Token: s.token, Fence: fences[k], Count: 1,
			TTL: s.req.TTL, AcquiredAt: acquired, ExpiresAt: l.ExpiresAt, Mode: modeOf(s.mode())}, s.req.TTL,
			AcquireRequest{Value: s.req.Value}, s.sent)
		e.n.ledger.inSet(k, s.token, len(s.req.Keys))
	}
	if err := e.n.writeSetRecord(ctx, s.token, setRecord{Keys: s.req.Keys, Owner: s.req.Owner, TTLMS: s.req.TTL.Milliseconds()}, s.req.TTL); err != nil {
		return SetLease{}, err
	}
	return l, nil
}

// abandonSet undoes what a set that failed left in Redis: its places in
// the queues, and any key granted to it.
func (e *Engine) abandonSet(s *setTry) {
	eachKey(s.req.Keys, func(_ int, k string) error {
		if s.waiter != "" {
			e.leave(k, s.waiter, s.deadline.Add(entrySlack), true, false)
		}
		if s.granting {
			ctx, cancel := context.WithTimeout(context.Background(), e.n.opts.CallTimeout)
			_, err := e.n.releaseAs(ctx, k, s.token, s.req.Actor, bySet, func(h *handed) bool {
				return e.hub.HandOff(k, h.waiter, h.lease)
			})
			cancel()
			if err != nil && unanswered(err) && e.n.later != nil {
				e.n.later(k, giveBackOf{token: s.token, actor: s.req.Actor, ttl: s.req.TTL, kind: bySet})
			}
		}
		return nil
	})
}

// setRecord is what Redis keeps of a live set under its token's hash:
// never the token.
type setRecord struct {
	Keys  []string `json:"keys"`
	Owner string   `json:"owner"`
	TTLMS int64    `json:"ttl_ms"`
	// Gathering: the set is being granted slot by slot and holds nothing
	// yet (lockset_gather.go).
	Gathering bool `json:"gathering,omitempty"`
	// Session is the handle of the session the set is bound to, if any.
	Session string `json:"session,omitempty"`
}

// setRecordKey is where a set's record lives: outside every lock's key
// space (lockd:{KEY}:…), so no listing or script of a lock sees it.
func setRecordKey(token string) string {
	sum := sha256.Sum256([]byte(token))
	return setRecordKeyPrefix + hex.EncodeToString(sum[:16])
}

const setRecordKeyPrefix = keyPrefix + "lockset:"

func (n *node) writeSetRecord(ctx context.Context, token string, r setRecord, ttl time.Duration) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	ctx, cancel := n.bound(ctx)
	defer cancel()
	sent := time.Now()
	if err := n.st.Cmd().Set(ctx, setRecordKey(token), b, ttl).Err(); err != nil {
		return wrap("lock set", err)
	}
	n.ledger.setSeen(token, b, sent.Add(ttl))
	return nil
}

// readSetRecord is the live set of token, or ErrLeaseLost.
func (n *node) readSetRecord(ctx context.Context, token string) (setRecord, error) {
	ctx, cancel := n.bound(ctx)
	defer cancel()
	b, err := n.st.Cmd().Get(ctx, setRecordKey(token)).Bytes()
	if errors.Is(err, redis.Nil) {
		return setRecord{}, ErrLeaseLost
	}
	if err != nil {
		return setRecord{}, wrap("lock set", err)
	}
	var r setRecord
	if err := json.Unmarshal(b, &r); err != nil {
		return setRecord{}, fmt.Errorf("lock: lock set record: %w", err)
	}
	if r.Gathering {
		// Never granted: its acquire failed, or is under way (and
		// nobody has its token yet).
		return setRecord{}, ErrLeaseLost
	}
	return r, nil
}

// RenewSet renews every key of the set with this token, to ttl (0: the
// set's own TTL). A key the set no longer holds (it lapsed, or was broken)
// ends the set: its other keys are released and the answer is
// ErrLeaseLost. The holder's proof, if any, comes in ctx (WithProof),
// consulted only when Redis no longer has the set's record.
func (e *Engine) RenewSet(ctx context.Context, token string, ttl time.Duration, actor string) (SetLease, error) {
	var r setRecord
	// A record Redis lost with its data is put back by the lockd that
	// wrote it (restoreBucket), as its keys' leases are, or from the
	// holder's proof.
	err := e.n.restoring(ctx, "", token, proofFrom(ctx), func() error {
		var err error
		if r, err = e.n.readSetRecord(ctx, token); errors.Is(err, ErrLeaseLost) {
			return ErrNotFound
		}
		return err
	})
	if errors.Is(err, ErrNotFound) {
		err = ErrLeaseLost
	}
	if err != nil {
		return SetLease{}, err
	}
	if r.Session != "" {
		return e.renewSetOfSession(ctx, token, r, actor)
	}
	if ttl <= 0 {
		ttl = time.Duration(r.TTLMS) * time.Millisecond
	}
	leases, err := e.renewKeys(ctx, token, r, actor, func(k string) (Lease, error) {
		return e.n.renewSetKey(ctx, k, RenewRequest{Token: token, TTL: ttl, Actor: actor})
	})
	if err != nil {
		return SetLease{}, err
	}
	l := SetLease{Token: token, Owner: r.Owner, TTL: ttl}
	for i, kl := range leases {
		l.Leases = append(l.Leases, SetKey{Key: r.Keys[i], Fence: kl.Fence})
		if l.ExpiresAt.IsZero() || kl.ExpiresAt.Before(l.ExpiresAt) {
			l.AcquiredAt, l.ExpiresAt = kl.AcquiredAt, kl.ExpiresAt
		}
	}
	r.TTLMS = ttl.Milliseconds()
	if err := e.n.writeSetRecord(ctx, token, r, ttl); err != nil {
		return SetLease{}, err
	}
	l.Proof = e.n.opts.Proofs.renewedSetProof(l, leases, proofFrom(ctx))
	return l, nil
}

// renewKeys renews every key of the set of token (r, its record) with
// renew, all at once. A key the set no longer holds (it lapsed, or was
// broken) ends the set: its other keys are released and the answer is
// ErrLeaseLost.
func (e *Engine) renewKeys(ctx context.Context, token string, r setRecord, actor string, renew func(key string) (Lease, error)) ([]Lease, error) {
	leases := make([]Lease, len(r.Keys))
	errs := eachKey(r.Keys, func(i int, k string) (err error) {
		leases[i], err = renew(k)
		return err
	})
	for i, err := range errs {
		if errors.Is(err, ErrLeaseLost) || errors.Is(err, ErrNotFound) {
			_, _ = e.ReleaseSet(context.WithoutCancel(ctx), token, actor)
			return nil, fmt.Errorf("%w: the set's key %s: %w", ErrLeaseLost, r.Keys[i], err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return leases, nil
}

// ReleaseSet releases every key of the set with this token and forgets
// the set; it answers how many keys it still held (ErrLeaseLost when the
// set is gone). The holder's proof, if any, comes in ctx (WithProof).
func (e *Engine) ReleaseSet(ctx context.Context, token, actor string) (int, error) {
	r, err := e.n.readSetRecordOrProof(ctx, token)
	if err != nil {
		return 0, err
	}
	errs := eachKey(r.Keys, func(_ int, k string) error {
		_, err := e.n.releaseAs(ctx, k, token, actor, bySet, func(h *handed) bool {
			return e.hub.HandOff(k, h.waiter, h.lease)
		})
		return err
	})
	held := 0
	var first error
	for _, err := range errs {
		switch {
		case err == nil:
			held++
		case errors.Is(err, ErrLeaseLost), errors.Is(err, ErrNotFound):
		default:
			first = cmp.Or(first, err)
		}
	}
	if first != nil {
		return held, first
	}
	dctx, cancel := e.n.bound(ctx)
	defer cancel()
	e.n.ledger.setSeen(token, nil, time.Time{})
	if err := e.n.st.Cmd().Del(dctx, setRecordKey(token)).Err(); err != nil {
		return held, wrap("lock set", err)
	}
	return held, nil
}

// eachKey runs f on every key at once, so that the store sends their
// scripts in one pipeline (one round trip on one server, one per master on
// a Cluster) rather than one after another; it answers each key's error.
func eachKey(keys []string, f func(i int, key string) error) []error {
	errs := make([]error, len(keys))
	var wg sync.WaitGroup
	for i, k := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = f(i, k)
		}()
	}
	wg.Wait()
	return errs
}

// AcquireSet answers ErrNoLockSets: a set's keys would each need a
// majority, and its waiters the queues Redlock keeps in process.
func (r *Redlock) AcquireSet(context.Context, SetRequest) (SetLease, error) {
	return SetLease{}, ErrNoLockSets
}

// RenewSet answers ErrNoLockSets.
func (r *Redlock) RenewSet(context.Context, string, time.Duration, string) (SetLease, error) {
	return SetLease{}, ErrNoLockSets
}

// ReleaseSet answers ErrNoLockSets.
func (r *Redlock) ReleaseSet(context.Context, string, string) (int, error) {
	return 0, ErrNoLockSets
}
