package lock

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockd/lockd/internal/lock/store"
)

// Prompt expiry. Redis forgets a lease when its TTL ends, but says nothing:
// keyspace notifications are off by default, often cannot be turned on
// (managed Redis), are node-local, are lost while nobody listens, and are
// only sent when Redis's expiry cycle finds the key — with a million keys
// that have a TTL, the cycle samples its way to a given key only after
// seconds or minutes. So lockd keeps its own schedule.
//
// Every script that grants, renews, re-enters, releases or breaks a lease
// also writes the lease's expiry into its bucket's schedule, a sorted set
// `lockd:expiries` (member: the lock key, score: expiry in Redis ms), in the
// same call: no extra round trip. On a Cluster a script may only touch keys
// of its own slot, so there each slot has its own schedule
// (`lockd:{<slot tag>}:expiries`, the tag from store.SlotTags).
//
// Each lockd runs a sweeper: every SweepInterval (250 ms) one script per
// master (sweep.lua) reads the entries that are due, and for each lease
// that Redis no longer has records "expired" in its history and in the
// event stream, then drops it from the schedule. On a Cluster the script
// visits every slot its node owns in one call (the allow-cross-slot-keys
// flag of Redis 7). Recording is idempotent — it happens in the key's
// atomic script only while the last event says the lease is live — so it
// does not matter which lockd notices a lapse first, or whether an acquire
// or a history read notices it before any sweeper. A sweeper lease per
// master (`lockd:sweeper`, or the first owned slot's) keeps replicas from
// repeating each other's work; when its holder dies another lockd takes
// over within the lease (3 sweeps).
//
// Cost: one script call per master per sweep, whatever the number of live
// leases: O(log N) per due entry, plus on a Cluster one ZRANGEBYSCORE per
// owned slot (about 5 500 per master of a three-master Cluster). Memory:
// one sorted-set member per live lease (about 100 bytes).

const (
	defaultRenewalsMax   = 100
	defaultEventsMax     = 100_000
	defaultSweepInterval = 250 * time.Millisecond
	// sweepBatch is the most lapses one bucket records in one call; a
	// sweep that finds more goes on at once (up to sweepRounds calls).
	sweepBatch  = 1000
	sweepRounds = 8
	// relayBatch is the most outbox events one Cluster sweep hands over.
	relayBatch = 2000
	// targetsTTL is how long a Cluster sweeper trusts its slot map.
	targetsTTL = 2 * time.Second
)

// LapseFunc hears of a lapse this process's sweeper recorded: the resource,
// when the lease lapsed and when it was noticed (Redis's clock), and how
// long it had been held (0 when unknown).
type LapseFunc func(res Resource, lapsed, noticed time.Time, held time.Duration)

// OnLapse sets the function told of every lapse this process's sweeper
// records (for metrics). It must not block.
func (e *Engine) OnLapse(f LapseFunc) {
	e.lapseMu.Lock()
	defer e.lapseMu.Unlock()
	e.lapse = f
}

// bucket is the Redis key prefix of the shared keys that key's scripts
// write beside the key's own: its expiry schedule and (Cluster) event
// outbox. On a Cluster the bucket is key's slot.
func (n *node) bucket(key string) string {
	if n.st.Sharded() {
		return bucketOf(store.SlotTags()[store.SlotOf(key)])
	}
	return bucketOf("")
}

// sweepTarget is one master and the buckets it owns, the first of which
// is its home (sweeper lease, due list).
type sweepTarget struct {
	addr    string
	node    redis.Scripter
	buckets []string
}

// sweeper caches a Cluster's targets between sweeps, and the buckets this
// process wrote to since it last told their master's due list.
type sweeper struct {
	mu      sync.Mutex
	targets []sweepTarget
	owner   map[string]string // bucket → master address
	at      time.Time
	notes   map[string]bool      // buckets to put on their master's due list
	full    map[string]time.Time // master address → its last full sweep
}

// noted puts key's bucket on its master's due list at the next sweep: on a
// Cluster the sweeper visits only due buckets, and a bucket this process
// just wrote may have a new earliest expiry or events in its outbox.
func (n *node) noted(key string) {
	if !n.st.Sharded() {
		return
	}
	n.sweeper.mu.Lock()
	defer n.sweeper.mu.Unlock()
	if n.sweeper.notes == nil {
		n.sweeper.notes = map[string]bool{}
	}
	n.sweeper.notes[n.bucket(key)] = true
}

// takeNotes hands out the noted buckets of the master at addr; put them
// back with giveNotes if the sweep fails.
func (n *node) takeNotes(addr string) []string {
	n.sweeper.mu.Lock()
	defer n.sweeper.mu.Unlock()
	var out []string
	for b := range n.sweeper.notes {
		if n.sweeper.owner[b] == addr {
			out = append(out, b)
			delete(n.sweeper.notes, b)
		}
	}
	return out
}

func (n *node) giveNotes(bs []string) {
	n.sweeper.mu.Lock()
	defer n.sweeper.mu.Unlock()
	if n.sweeper.notes == nil {
		n.sweeper.notes = map[string]bool{}
	}
	for _, b := range bs {
		n.sweeper.notes[b] = true
	}
}

// fullSweepEvery is how often a Cluster sweeper visits every slot of a
// master, not only the due ones: it finds what the due lists missed (a
// lockd that died before telling the due list, a slot that moved).
const fullSweepEvery = 10 * time.Second

// fullDue says whether the master at addr is due a full sweep, and if so
// counts it as done.
func (n *node) fullDue(addr string) bool {
	n.sweeper.mu.Lock()
	defer n.sweeper.mu.Unlock()
	if n.sweeper.full == nil {
		n.sweeper.full = map[string]time.Time{}
	}
	if time.Since(n.sweeper.full[addr]) < fullSweepEvery {
		return false
	}
	n.sweeper.full[addr] = time.Now()
	return true
}

func (e *Engine) sweepLoop(done <-chan struct{}) {
	t := time.NewTicker(e.n.opts.SweepInterval)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), max(e.n.opts.CallTimeout, 2*e.n.opts.SweepInterval))
		_ = e.Sweep(ctx)
		cancel()
	}
}

// Sweep runs one sweep over every master: it records the lapses that are
// due. The sweeper loop calls it; tests may too.
func (e *Engine) Sweep(ctx context.Context) error {
	e.lapseMu.Lock()
	f := e.lapse
	e.lapseMu.Unlock()
	return e.n.sweep(ctx, f)
}

// sweep runs one sweep over every master of the node and tells report
// (if not nil) of each lapse it recorded.
func (n *node) sweep(ctx context.Context, report LapseFunc) error {
	targets, err := n.sweepTargets(ctx)
	if err != nil {
		return wrap("sweep", err)
	}
	var wg sync.WaitGroup
	errs := make([]error, len(targets))
	for i, t := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range sweepRounds {
				more, err := n.sweepNode(ctx, t, report)
				if err != nil || !more {
					errs[i] = err
					return
				}
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return wrap("sweep", err)
		}
	}
	return nil
}

// sweepNode runs sweep.lua once on one master and hands over what it
// found; more says that it should run again at once.
func (n *node) sweepNode(ctx context.Context, t sweepTarget, report LapseFunc) (more bool, err error) {
	relay, mode, buckets := 0, "all", t.buckets
	var notes []string
	if n.st.Sharded() {
		relay, mode, buckets = relayBatch, "due", t.buckets[:1]
		notes = n.takeNotes(t.addr)
		if n.fullDue(t.addr) {
			mode, buckets = "all", t.buckets
		}
	}
	lease := max(3*n.opts.SweepInterval, 500*time.Millisecond)
	// The caps and the retention are in the script's text (scriptConfig).
	args := make([]any, 0, 7+2*len(notes)+len(buckets))
	args = append(args, n.id, lease.Milliseconds(), sweepBatch, relay, mode, len(notes))
	for _, b := range notes {
		args = append(args, b, 0) // due at once
	}
	for _, b := range buckets {
		args = append(args, b)
	}
	v, err := n.scripts.sweep.Run(ctx, t.node, nil, args...).Result()
	if err != nil {
		n.giveNotes(notes)
		return false, err
	}
	r, err := newReply(v)
	if err != nil {
		return false, err
	}
	if r.str(0) == "busy" || r.len() < 5 {
		return false, r.err
	}
	now := r.time(4)
	lapsed(r.vals[2], now, report)
	if err := n.relay(ctx, r.vals[3]); err != nil {
		return false, err
	}
	return r.int(1) == 1, r.err
}

// lapsed tells report of the lapses of one sweep.
func lapsed(v any, now time.Time, report LapseFunc) {
	if report == nil {
		return
	}
	l, _ := v.([]any)
	for i := 0; i+3 < len(l); i += 4 {
		key, _ := l[i].(string)
		at := time.UnixMilli(atoi(fmt.Sprint(l[i+1]))).UTC()
		held := time.Duration(0)
		if typ, _ := l[i+2].(string); typ == "acquired" {
			held = at.Sub(time.UnixMilli(atoi(fmt.Sprint(l[i+3]))))
		}
		report(resourceOf(key), at, now, held)
	}
}

// sweepTargets is every master with its buckets: the one server (or
// Sentinel's master) with the single bucket, or each Cluster master with
// its slots.
func (n *node) sweepTargets(ctx context.Context) ([]sweepTarget, error) {
	if !n.st.Sharded() {
		return []sweepTarget{{node: n.st.Cmd(), buckets: []string{bucketOf("")}}}, nil
	}
	n.sweeper.mu.Lock()
	defer n.sweeper.mu.Unlock()
	if n.sweeper.targets != nil && time.Since(n.sweeper.at) < targetsTTL {
		return n.sweeper.targets, nil
	}
	masters, err := n.st.Masters(ctx)
	if err != nil {
		return nil, err
	}
	owner := map[string]string{}
	tags := store.SlotTags()
	targets := make([]sweepTarget, 0, len(masters))
	for _, m := range masters {
		var buckets []string
		for _, r := range m.Slots {
			for slot := r.Start; slot <= r.End; slot++ {
				b := bucketOf(tags[slot])
				buckets = append(buckets, b)
				owner[b] = m.Addr
			}
		}
		// The first bucket by name is home: every lockd picks the same one,
		// and it stays while the master keeps that slot.
		slices.Sort(buckets)
		targets = append(targets, sweepTarget{addr: m.Addr, node: m.Node, buckets: buckets})
	}
	n.sweeper.targets, n.sweeper.owner, n.sweeper.at = targets, owner, time.Now()
	return targets, nil
}

// heldSince is how long ago (by this host's clock) a lease was acquired at
// Redis ms acquiredMS.
func heldSince(acquiredMS int64) time.Duration {
	if acquiredMS <= 0 {
		return 0
	}
	return max(0, time.Since(time.UnixMilli(acquiredMS)))
}

// atRisk: the last renewal came with under a third of the TTL left, or
// under a third is left now.
func atRisk(s State) bool {
	third := s.TTL / 3
	return s.Remaining < third || (s.Renewals > 0 && s.LeftAtRenewal > 0 && s.LeftAtRenewal < third)
}

// parseStreamID reads a Redis stream ID "ms-seq".
func parseStreamID(id string) (ms, seq uint64, ok bool) {
	a, b, found := cutDash(id)
	if !found {
		return 0, 0, false
	}
	ms, err1 := strconv.ParseUint(a, 10, 64)
	seq, err2 := strconv.ParseUint(b, 10, 64)
	return ms, seq, err1 == nil && err2 == nil
}

func cutDash(s string) (string, string, bool) {
	for i := 0; i < len(s); i++ {
		if s[i] == '-' {
			return s[:i], s[i+1:], true
		}
	}
	return s, "", false
}
