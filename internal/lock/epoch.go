package lock

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockd/lockd/internal/lock/store"
)

// epochs is what this process knows of the buckets' epoch markers
// (scripts/lib/epoch.lua, epoch.check), per marker: the id it saw last, and until when a
// lease, shared hold or permit of the bucket may still be live, by this
// process's clock. That end is what it read of the bucket's expiries at
// its last refresh (epoch.lua, every Options.EpochRefresh) or, if later,
// of a grant or renewal of its own since then; so after a loss of data
// the quarantine lasts as long as the last forgotten lease could, and a
// lease released before the last refresh does not count. Ends are kept as
// a local reading of a duration left, so no two clocks are compared.
type epochs struct {
	// seed and made name the markers this process makes: seed-1, seed-2…
	// (unique without a random read per acquire).
	seed string
	made atomic.Int64

	mu      sync.Mutex
	markers map[string]*epochSeen
	// until is the latest quarantine end this process was told of: by a
	// reply, or by the last refresh, which replaces it (EndQuarantine
	// brings it forward in Redis, for every lockd).
	until time.Time

	// lost is when this process last found that Redis lost its data.
	lost time.Time

	// refresh serializes refreshes; started is when the last one began.
	refresh sync.Mutex
	started time.Time
	kick    chan struct{} // keepEpochs refreshes at once (kickEpochs)
}

type epochSeen struct {
	id    string
	sched string    // the bucket's expiry schedule
	read  time.Time // the bucket's last lease ends, as last read
	own   time.Time // the last lease this process granted or renewed since ends
	used  time.Time // when this process last met the marker
	// known is the lockds the marker knew at the last read, and until
	// when each one's leases may be live (epoch.lua's r:<replica>).
	known map[string]time.Time
}

// setKnown reads epoch.lua's "replica=ms_left …", read at now.
func (s *epochSeen) setKnown(list string, now time.Time) {
	s.known = map[string]time.Time{}
	for _, f := range strings.Fields(list) {
		rid, ms, ok := strings.Cut(f, "=")
		if v, err := strconv.ParseInt(ms, 10, 64); ok && err == nil {
			s.known[rid] = now.Add(time.Duration(v) * time.Millisecond)
		}
	}
}

// knownArg is known as epoch.lua's ARGV[6], with what is left from now.
func (s *epochSeen) knownArg() string {
	var b strings.Builder
	now := time.Now()
	for rid, until := range s.known {
		if left := until.Sub(now).Milliseconds(); left > 0 {
			fmt.Fprintf(&b, "%s=%d ", rid, left)
		}
	}
	return b.String()
}

// newEpochID is the id of a marker this process would make (acquire.lua
// uses it only when the marker is missing).
func (n *node) newEpochID() string {
	return n.epochs.seed + "-" + strconv.FormatInt(n.epochs.made.Add(1), 10)
}

func (p *epochs) of(sh *sharedKeys) *epochSeen {
	if p.markers == nil {
		p.markers = map[string]*epochSeen{}
	}
	s := p.markers[sh.epoch]
	if s == nil {
		s = &epochSeen{sched: sh.expiries}
		p.markers[sh.epoch] = s
	}
	s.used = time.Now()
	return s
}

// epochIdle is how long after its last use a Cluster slot's marker is no
// longer refreshed, unless a lease known to this process may be live in
// it: the refresh costs one call per slot, and a lockd that touches keys
// of every slot should not pay 16,384 calls a second for ones it no longer
// uses. (The one marker of a single server or Sentinel is always kept.)
const epochIdle = time.Minute

// idle says whether s is a Cluster marker to forget.
func (s *epochSeen) idle(now time.Time) bool {
	return now.Sub(s.used) > epochIdle && now.After(s.read) && now.After(s.own)
}

// get is the id last seen in sh's marker and how long what this process
// knows of in the bucket may still be live.
func (p *epochs) get(sh *sharedKeys) (string, time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.markers[sh.epoch]
	if s == nil {
		return "", 0
	}
	return s.id, max(0, time.Until(s.read), time.Until(s.own))
}

// saw notes the id of a reply that checked the marker (epoch.check): it
// counts only if this process knew none; another id says Redis lost its
// data, which only a refresh takes in (it puts back what this process
// knows first), so it asks for one now. No id (a marker gone) too.
func (n *node) saw(sh *sharedKeys, id string) {
	n.epochs.mu.Lock()
	defer n.epochs.mu.Unlock()
	s := n.epochs.of(sh)
	switch {
	case s.id == "" && id != "":
		s.id = id
	case s.id != id:
		n.kickEpochs()
	}
}

// met notes the id read by a script that does not check the marker (a
// held key): it counts only if this process knew none, so that a marker
// made anew after a loss is still noticed as new.
func (p *epochs) met(sh *sharedKeys, id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if s := p.of(sh); s.id == "" {
		s.id = id
	}
}

// lease notes a lease, hold or permit that this process granted or
// renewed in sh's bucket, which has left to live.
func (p *epochs) lease(sh *sharedKeys, left time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.of(sh)
	if end := time.Now().Add(left); end.After(s.own) {
		s.own = end
	}
}

// recovering notes a quarantine that lasts left more.
func (p *epochs) recovering(left time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if u := time.Now().Add(left); u.After(p.until) {
		p.until = u
	}
}

// recovering is how much longer the restart quarantine that this process
// last heard of on this node lasts; 0 when none.
func (n *node) recovering() time.Duration {
	n.epochs.mu.Lock()
	defer n.epochs.mu.Unlock()
	return max(0, time.Until(n.epochs.until))
}

// Recovering is how much longer the restart quarantine that this process
// last heard of lasts; 0 when none.
func (e *Engine) Recovering() time.Duration { return e.n.recovering() }

// epochArgs are what acquire.lua needs of this process's knowledge of sh's
// bucket: the id it saw ("" with the quarantine off, which then never
// starts one), and the shortest quarantine after a loss.
func (n *node) epochArgs(sh *sharedKeys) (seen string, minMs int64) {
	seen, _ = n.epochs.get(sh)
	if n.opts.NoQuarantine {
		seen = ""
	}
	return seen, n.minQuarantine().Milliseconds()
}

// minQuarantine is the shortest quarantine after a loss: long enough for
// every other lockd to notice it (one refresh) and add the leases it
// granted to it before anything is granted, with a refresh to spare.
func (n *node) minQuarantine() time.Duration {
	return 2 * n.opts.EpochRefresh
}

// seedEpoch reads the server's marker when the process starts, so that a
// loss of data is noticed even if its first acquires come after it. (On a
// Cluster, with a marker per slot, each is learnt from the first reply.)
func (n *node) seedEpoch() {
	if n.st.Sharded() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), n.opts.CallTimeout)
	defer cancel()
	n.epochs.mu.Lock()
	n.epochs.of(n.shared[0])
	n.epochs.mu.Unlock()
	n.refreshEpochs(ctx)
}

// keepEpochs runs refreshEpochs every Options.EpochRefresh until done
// closes, on its caller's goroutine (the node's owner runs it): this process
// learns until when the leases of each bucket it knows may be live, and
// should Redis have lost their data it starts the quarantine, or adds what
// it knows to one another process started, without waiting for a request.
func (n *node) keepEpochs(done <-chan struct{}) {
	t := time.NewTicker(n.opts.EpochRefresh)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
		case <-n.epochs.kick:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*n.opts.CallTimeout)
		n.refreshEpochs(ctx)
		cancel()
	}
}

// refreshEpochs runs epoch.lua on every marker this process knows, in one
// pipeline (twice when Redis lost the script, as it does with its data).
// What it reads replaces what this process read before, and its own
// grants before the read: a lease released since no longer counts. A
// marker that says Redis lost its data has this process put back the
// leases it knows there (restoreBucket), then say so (epoch.restored):
// only then does it take the new marker's id.
func (n *node) refreshEpochs(ctx context.Context) {
	n.epochs.refresh.Lock()
	defer n.epochs.refresh.Unlock()
	n.epochs.started = time.Now()
	calls := n.epochCalls()
	if len(calls) == 0 {
		return
	}
	lost := n.runEpochCalls(ctx, calls, false)
	for _, c := range calls {
		if !slices.Contains(lost, c) && c.seen != "" && c.seen == c.s.id {
			n.validateLedger(ctx, c.marker, c.seen)
		}
	}
	if len(lost) == 0 {
		return
	}
	for _, c := range lost {
		got, err := n.restoreBucket(ctx, c.marker)
		if err != nil {
			c.err = err
			continue
		}
		c.restored = got
		c.seen = c.newID
	}
	var ok []*epochCall
	for _, c := range lost {
		if c.err == nil {
			ok = append(ok, c)
		}
	}
	n.runEpochCalls(ctx, ok, true)
}

// epochCall is one marker's refresh.
type epochCall struct {
	marker   string
	s        *epochSeen
	own      time.Time // s.own before the read
	seen     string    // the id this process saw, sent
	newID    string    // the marker's id, when it says Redis lost data
	restored Restored
	err      error
	cmd      *redis.Cmd
}

// epochCalls lists the markers to refresh, forgetting a Cluster's idle ones.
func (n *node) epochCalls() []*epochCall {
	n.epochs.mu.Lock()
	defer n.epochs.mu.Unlock()
	now := time.Now()
	calls := make([]*epochCall, 0, len(n.epochs.markers))
	for m, s := range n.epochs.markers {
		if n.st.Sharded() && s.idle(now) {
			delete(n.epochs.markers, m)
			continue
		}
		seen := s.id
		if n.opts.NoQuarantine {
			seen = ""
		}
		calls = append(calls, &epochCall{marker: m, s: s, seen: seen})
	}
	return calls
}

// runEpochCalls runs epoch.lua for calls (restored: each says it has put
// its leases back) and notes what they read; it answers the markers that
// say Redis lost data this process must put back.
func (n *node) runEpochCalls(ctx context.Context, calls []*epochCall, restored bool) []*epochCall {
	if len(calls) == 0 {
		return nil
	}
	n.epochs.mu.Lock()
	// A reply's quarantine noted while the refresh runs may be newer than
	// what it reads: then the refresh only extends.
	before := n.epochs.until
	n.epochs.mu.Unlock()
	lastBy := n.ledger.lastBy(func(key string) string { return n.sharedOf(key).epoch })
	flag := ""
	if restored {
		flag = "restored"
	}
	run := func() error {
		return n.st.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, c := range calls {
				n.epochs.mu.Lock()
				// Grants noted from now on may come after the read.
				c.own, c.s.own = c.s.own, time.Time{}
				known := c.s.knownArg()
				n.epochs.mu.Unlock()
				c.cmd = n.scripts.epoch.EvalSha(ctx, p, []string{c.marker, c.s.sched}, c.seen,
					n.minQuarantine().Milliseconds(), n.newEpochID(), n.id, lastBy[c.marker].Milliseconds(), known, flag)
			}
			return nil
		})
	}
	restore := func(c *epochCall) {
		if c.own.After(c.s.own) {
			c.s.own = c.own
		}
	}
	if err := run(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") && n.st.Load(ctx, n.scripts.epoch) == nil {
		n.epochs.mu.Lock()
		for _, c := range calls {
			restore(c)
		}
		n.epochs.mu.Unlock()
		_ = run()
	}
	now := time.Now()
	n.epochs.mu.Lock()
	defer n.epochs.mu.Unlock()
	var until time.Time // the latest quarantine end read
	var lost []*epochCall
	read := 0
	for _, c := range calls {
		v, err := c.cmd.Result()
		if err != nil {
			restore(c)
			continue
		}
		r, err := newReply(v)
		if err != nil || r.len() < 5 {
			restore(c)
			continue
		}
		id, left, live, known, isNew := r.str(0), r.ms(1), r.ms(2), r.str(3), r.str(4) == "1"
		if r.err != nil {
			restore(c)
			continue
		}
		read++
		if isNew {
			c.newID = id
			lost = append(lost, c)
			n.epochs.lost = now
		} else if id != "" {
			c.s.id = id
			c.s.setKnown(known, now)
		}
		c.s.read = now.Add(live)
		if u := now.Add(left); left > 0 && u.After(until) {
			until = u
		}
	}
	// What Redis holds is the quarantine, unless an operator ended it
	// (EndQuarantine), which this process follows here. With a marker
	// unread, or a reply's newer news, it only extends.
	if read == len(calls) && n.epochs.until.Equal(before) && !restored {
		n.epochs.until = until
	} else if until.After(n.epochs.until) {
		n.epochs.until = until
	}
	return lost
}

// lostSince says whether this process found that Redis lost its data
// after t (a refresh that noticed it, within a refresh of the loss).
func (n *node) lostSince(t time.Time) bool {
	n.epochs.mu.Lock()
	defer n.epochs.mu.Unlock()
	return n.epochs.lost.After(t)
}

// refreshSoon refreshes the markers unless a refresh began after since
// (it has seen what since saw, and has ended once this one has the lock).
func (n *node) refreshSoon(ctx context.Context, since time.Time) {
	n.epochs.refresh.Lock()
	began := n.epochs.started
	n.epochs.refresh.Unlock()
	if began.After(since) {
		return
	}
	n.refreshEpochs(ctx)
}

// kickEpochs asks keepEpochs to refresh now: a reply said that Redis lost
// its data.
func (n *node) kickEpochs() {
	select {
	case n.epochs.kick <- struct{}{}:
	default:
	}
}

// quarantineEnd ends a bucket's restart quarantine
// (scripts/quarantine_end.lua).
var quarantineEnd = redis.NewScript(mustRead("quarantine_end"))

// EndQuarantine ends the restart quarantine now, for every lockd on this
// Redis: each follows within one Options.EpochRefresh (this one at once),
// grants again and is ready. It returns how long the quarantine still had
// (0: none was on). The leases Redis forgot may still be live: an
// operator ends it knowing that their holders have stopped, or that
// overlapping them is acceptable. A lockd that had not yet noticed the
// loss of data (it notices within one refresh) still adds what it knows.
func (e *Engine) EndQuarantine(ctx context.Context) (time.Duration, error) {
	return e.n.endQuarantine(ctx)
}

// endQuarantine runs quarantine_end.lua on every marker of the node: the
// one of a single server or Sentinel, or every Cluster slot's (a marker of
// a slot this process never used may hold a quarantine another lockd
// started), in one pipeline.
func (n *node) endQuarantine(ctx context.Context) (time.Duration, error) {
	var markers []string
	if n.st.Sharded() {
		for _, tag := range store.SlotTags() {
			markers = append(markers, newShared(tag).epoch)
		}
	} else {
		markers = []string{n.shared[0].epoch}
	}
	cmds := make([]*redis.Cmd, len(markers))
	run := func() error {
		return n.st.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, m := range markers {
				cmds[i] = quarantineEnd.EvalSha(ctx, p, []string{m})
			}
			return nil
		})
	}
	err := run()
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		if err := n.st.Load(ctx, quarantineEnd); err != nil {
			return 0, wrap("end quarantine", err)
		}
		err = run()
	}
	if err != nil {
		return 0, wrap("end quarantine", err)
	}
	var left time.Duration
	for _, c := range cmds {
		ms, err := c.Int64()
		if err != nil {
			return 0, wrap("end quarantine", err)
		}
		left = max(left, time.Duration(ms)*time.Millisecond)
	}
	n.epochs.mu.Lock()
	n.epochs.until = time.Time{}
	n.epochs.mu.Unlock()
	return left, nil
}
