package lock

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// epochMarker is the Redis key of the restart-quarantine marker that the
// acquire script checks for key (see acquire.lua): one for the whole
// server, or on a Cluster one per slot, since a script may touch only keys
// of its own slot.
func (e *Engine) epochKey(key string) string {
	return e.sharedOf(key).epoch
}

// epochs remembers, per marker, the id this process saw last, and the
// longest TTL granted under any marker it saw: what acquire.lua needs to
// notice a loss and to know how long to quarantine.
type epochs struct {
	// seed and made name the markers this process makes: seed-1, seed-2…
	// (unique without a random read per acquire).
	seed string
	made atomic.Int64

	mu     sync.Mutex
	seen   map[string]string // marker → id
	maxTTL time.Duration
	own    time.Time // when the last lease this process granted or renewed ends
	until  time.Time // the latest quarantine end this process was told of
}

// newEpochID is the id of a marker this process would make (acquire.lua
// uses it only when the marker is missing).
func (e *Engine) newEpochID() string {
	return e.epochs.seed + "-" + strconv.FormatInt(e.epochs.made.Add(1), 10)
}

func (p *epochs) get(marker string) (string, time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.seen[marker], p.maxTTL
}

func (p *epochs) saw(marker, id string, maxTTL time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.seen == nil {
		p.seen = map[string]string{}
	}
	p.seen[marker] = id
	p.maxTTL = max(p.maxTTL, maxTTL)
}

func (p *epochs) markers() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]string, 0, len(p.seen))
	for m := range p.seen {
		out = append(out, m)
	}
	return out
}

func (p *epochs) recovering(left time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if u := time.Now().Add(left); u.After(p.until) {
		p.until = u
	}
}

// Recovering is how much longer the restart quarantine that this process
// last heard of lasts; 0 when none.
func (e *Engine) Recovering() time.Duration {
	e.epochs.mu.Lock()
	defer e.epochs.mu.Unlock()
	return max(0, time.Until(e.epochs.until))
}

// lease notes a lease this process granted or renewed.
func (p *epochs) lease(l Lease) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.maxTTL = max(p.maxTTL, l.TTL)
	if l.ExpiresAt.After(p.own) {
		p.own = l.ExpiresAt
	}
}

// ownLeft is how long the last lease this process granted or renewed lasts.
func (p *epochs) ownLeft() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return max(0, time.Until(p.own))
}

// seedEpoch reads the server's marker when the process starts, so that a
// loss of data is noticed even if its first acquires come after it. (On a
// Cluster, with a marker per slot, each is learnt from the first reply.)
func (e *Engine) seedEpoch() {
	if e.st.Sharded() || e.opts.NoQuarantine {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), e.opts.CallTimeout)
	defer cancel()
	marker := e.epochKey("")
	v, err := e.st.Cmd().HMGet(ctx, marker, "id", "maxttl").Result()
	if err != nil || len(v) != 2 {
		return
	}
	id, _ := v[0].(string)
	ms, _ := v[1].(string)
	if id == "" {
		return
	}
	n, _ := strconv.ParseInt(ms, 10, 64)
	e.epochs.saw(marker, id, time.Duration(n)*time.Millisecond)
}

// refreshEpochs keeps epochs.maxTTL up with the grants of other processes,
// one pipelined read of the known markers every Options.EpochRefresh.
func (e *Engine) refreshEpochs(done <-chan struct{}) {
	t := time.NewTicker(e.opts.EpochRefresh)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
		}
		markers := e.epochs.markers()
		if len(markers) == 0 {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), e.opts.CallTimeout)
		cmds := make([]*redis.StringCmd, len(markers))
		_ = e.st.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, m := range markers {
				cmds[i] = p.HGet(ctx, m, "maxttl")
			}
			return nil
		})
		cancel()
		longest := time.Duration(0)
		for _, c := range cmds {
			if ms, err := c.Int64(); err == nil {
				longest = max(longest, time.Duration(ms)*time.Millisecond)
			}
		}
		e.epochs.mu.Lock()
		e.epochs.maxTTL = max(e.epochs.maxTTL, longest)
		e.epochs.mu.Unlock()
	}
}
