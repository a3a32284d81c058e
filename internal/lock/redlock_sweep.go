package lock

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Lapses under Redlock. Each master records the lapse of its own copy of a
// lease as one Redis does (expiry.go: sweep.lua, with a sweeper lease per
// master). A Redlock lease has lapsed once a majority of the masters no
// longer hold it, so the lapse metrics (OnLapse) must hear of it once: not
// once per master, and not never. Two things make it so.
//
// One lockd sweeps at a time: the one that holds the Redlock sweeper
// lease, lockd:redlock:sweeper, on a majority of the masters (taken or
// renewed at every sweep, for a few sweeps). Without it each master's own
// sweeper lease could go to another replica, each replica would hear of
// fewer than a majority of a lease's lapses, and nobody would count it.
//
// That lockd counts a lapse when the quorum-th master reports it
// (lapseTally): the moment the key became free. The other masters' reports
// of the same lease come later and are absorbed.
//
// A lapse goes uncounted when the sweeping lockd changes while a lease's
// copies lapse (each lockd hears of fewer than a majority), or when the
// masters' reports of it come more than the tally window apart (a master
// that was paused). Reports of two leases of one key are told apart by the
// master: a master reports one lapse of a key at a time.

// claimSweeper takes the sweeper lease when it is free or already ours,
// for ARGV[2] ms; 1 when it did.
var claimSweeper = redis.NewScript(`
local holder = redis.call('GET', KEYS[1])
if holder and holder ~= ARGV[1] then
  return 0
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
`)

// dropSweeper gives the sweeper lease back if it is ours.
var dropSweeper = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
`)

// sweepLease is how long one claim of the sweeper lease lasts: a few
// sweeps, so that one slow sweep does not hand it over, and short enough
// that another lockd takes over within about a second when its holder
// dies.
func (r *Redlock) sweepLease() time.Duration {
	return max(4*r.opts.SweepInterval, time.Second)
}

// leadSweep takes or renews the sweeper lease and says whether this lockd
// holds it on a majority. When it does not, it gives back what it got, so
// that two lockd that each got a minority do not keep it from each other.
func (r *Redlock) leadSweep(ctx context.Context) bool {
	ms := r.sweepLease().Milliseconds()
	got, _ := eachUntil(ctx, r, r.opts.CallTimeout, func(ctx context.Context, n *node) (bool, error) {
		return n.claimRedlockSweeper(ctx, r.id, ms)
	}, func(ok bool, err error) bool { return ok && err == nil })
	var mine []*node
	for i, ok := range got {
		if ok {
			mine = append(mine, r.nodes[i])
		}
	}
	if len(mine) >= r.quorum {
		return true
	}
	r.dropSweep(ctx, mine)
	return false
}

// dropSweep gives the sweeper lease back on nodes.
func (r *Redlock) dropSweep(ctx context.Context, nodes []*node) {
	var wg sync.WaitGroup
	for _, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n.dropRedlockSweeper(ctx, r.id)
		}()
	}
	wg.Wait()
}

// claimRedlockSweeper takes the Redlock sweeper lease on this master for
// ms, or renews it, for id; true when id holds it now.
func (n *node) claimRedlockSweeper(ctx context.Context, id string, ms int64) (bool, error) {
	v, err := n.st.Run(ctx, claimSweeper, []string{redlockSweeperKey}, id, ms)
	return v == int64(1), err
}

// dropRedlockSweeper gives the Redlock sweeper lease back on this master
// if id holds it.
func (n *node) dropRedlockSweeper(ctx context.Context, id string) {
	_, _ = n.st.Run(ctx, dropSweeper, []string{redlockSweeperKey}, id)
}

// sweepLoop sweeps every master every SweepInterval while this lockd holds
// the sweeper lease, until stop closes; then it gives the lease back, so
// that another lockd takes over at once.
func (r *Redlock) sweepLoop(stop <-chan struct{}) {
	t := time.NewTicker(r.opts.SweepInterval)
	defer t.Stop()
	var wg sync.WaitGroup
	// sweeping says which masters' sweeps are still running: a paused
	// master's sweep runs to its timeout while the others go on at every
	// tick.
	sweeping := make([]bool, len(r.nodes))
	var mu sync.Mutex
	bound := max(r.opts.CallTimeout, 2*r.opts.SweepInterval)
	for {
		select {
		case <-stop:
			wg.Wait()
			ctx, cancel := context.WithTimeout(context.Background(), r.opts.CallTimeout)
			r.dropSweep(ctx, r.nodes)
			cancel()
			return
		case <-t.C:
		}
		r.lapses.prune(time.Now())
		ctx, cancel := context.WithTimeout(context.Background(), bound)
		lead := r.leadSweep(ctx)
		cancel()
		if !lead {
			continue
		}
		for i, n := range r.nodes {
			mu.Lock()
			busy := sweeping[i]
			sweeping[i] = true
			mu.Unlock()
			if busy {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), bound)
				_ = n.sweep(ctx, r.lapses.of(i))
				cancel()
				mu.Lock()
				sweeping[i] = false
				mu.Unlock()
			}()
		}
	}
}

// OnLapse sets the function told of every lapse of a lease on a majority of
// the masters, once per lease, while this lockd sweeps (see above). It
// must not block.
func (r *Redlock) OnLapse(f LapseFunc) {
	r.lapses.mu.Lock()
	defer r.lapses.mu.Unlock()
	r.lapses.f = f
}

// lapseTally hears the masters' lapses and tells f of a lease's lapse when
// the quorum-th master reports it, with that master's times.
type lapseTally struct {
	quorum, nodes int
	// window is how far apart the masters' reports of one lease may come:
	// its copies expire within the spread of its last grant or renewal
	// (each master within the call timeout), and each master is swept
	// every sweep interval.
	window time.Duration

	mu   sync.Mutex
	f    LapseFunc
	keys map[string]*lapseCount
}

// lapseCount is one lease's lapse as the masters report it.
type lapseCount struct {
	from  []bool    // the masters that reported it
	n     int       // how many did
	first time.Time // when the first report came (this host's clock)
}

func newLapseTally(quorum, nodes int, window time.Duration) *lapseTally {
	return &lapseTally{quorum: quorum, nodes: nodes, window: window, keys: map[string]*lapseCount{}}
}

// of is master node's LapseFunc: it reports to the tally.
func (t *lapseTally) of(node int) LapseFunc {
	return func(res Resource, lapsed, noticed time.Time, held time.Duration) {
		t.report(node, res.id(), lapsed, noticed, held)
	}
}

// report is what master node's LapseFunc reports.
func (t *lapseTally) report(node int, key string, lapsed, noticed time.Time, held time.Duration) {
	now := time.Now()
	t.mu.Lock()
	f := t.f
	c := t.keys[key]
	// A master that reports the key again, or a report long after the
	// first, is about another lease.
	if c == nil || c.from[node] || now.Sub(c.first) > t.window {
		c = &lapseCount{from: make([]bool, t.nodes), first: now}
		t.keys[key] = c
	}
	c.from[node] = true
	c.n++
	tell := c.n == t.quorum
	t.mu.Unlock()
	if tell && f != nil {
		f(resourceOf(key), lapsed, noticed, held)
	}
}

// prune forgets the lapses whose first report is older than the window.
func (t *lapseTally) prune(now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for k, c := range t.keys {
		if now.Sub(c.first) > t.window {
			delete(t.keys, k)
		}
	}
}
