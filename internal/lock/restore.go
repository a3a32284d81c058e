package lock

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// After Redis loses its data (a restart without persistence, a flush, a
// failover to a replica that missed writes), each lockd puts back the
// leases it knows (its ledger) as soon as it notices (refreshEpochs), and
// only then says so in the new epoch marker; until every lockd that had
// leases live has done so, no key of the bucket is granted (epoch.lua).
// So a holder's next renew, through any lockd, finds its lease as it was.

// restoreCall is restore.lua's call, as acquireCall is acquire.lua's.
type restoreCall struct {
	lease, hist, sched, holders, stream, tomb string

	mode, token, owner, fence, count, ttlMS, acquiredAt, leftMS, limit, delay, value, session, reason string
	one                                                                                               string // "1": a write a failover lost (restoreOne)
	set                                                                                               string // the lock set's size, "" for a lone grant
}

func restoreCallOf(key string, sh *sharedKeys, r restorable, reason string) restoreCall {
	k := keysOf(key)
	delay := ""
	if r.delay > 0 {
		delay = strconv.FormatInt(max(1, r.delay.Milliseconds()), 10)
	}
	c := restoreCall{lease: k.lease, hist: k.hist, sched: sh.expiries, holders: k.holders, stream: sh.events, tomb: tombKey(key, r.token),
		mode: r.mode, token: r.token, owner: r.owner, fence: strconv.FormatInt(r.fence, 10), count: strconv.Itoa(max(1, r.count)),
		ttlMS: strconv.FormatInt(r.ttl.Milliseconds(), 10), acquiredAt: strconv.FormatInt(r.acquired.UnixMilli(), 10),
		leftMS: strconv.FormatInt(time.Until(r.expires).Milliseconds(), 10), limit: strconv.Itoa(r.limit), delay: delay,
		value: r.value, session: r.session, reason: reason}
	if r.set > 0 {
		c.set = strconv.Itoa(r.set)
	}
	return c
}

func (c restoreCall) args() ([]string, []any) {
	return []string{c.lease, c.hist, c.sched, c.holders, c.stream, c.tomb},
		[]any{c.mode, c.token, c.owner, c.fence, c.count, c.ttlMS, c.acquiredAt, c.leftMS, c.limit, c.delay, c.value,
			c.session, c.reason, c.one, c.set}
}

// tombKey is the key of the tombstone of key's lease token: a lease that
// ended before a loss, whose proof must restore nothing. It names the
// token by a hash (a secret is never a key's name).
func tombKey(key, token string) string {
	sum := sha256.Sum256([]byte("lockd tomb\x00" + token))
	return keyPrefix + "{" + key + "}:tomb:" + hex.EncodeToString(sum[:12])
}

// writeTombstones writes back, after a loss, the tombstones of the leases
// of the bucket of marker that ended through this process with time left.
func (n *node) writeTombstones(ctx context.Context, marker string) error {
	tombs := n.ledger.tombstones(func(key string) bool { return n.sharedOf(key).epoch == marker })
	if len(tombs) == 0 {
		return nil
	}
	err := n.st.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, t := range tombs {
			if left := time.Until(t.expires); left > 0 {
				p.Set(ctx, tombKey(t.key, t.token), "1", left)
			}
		}
		return nil
	})
	return wrap("tombstones", err)
}

// Restored counts what a restore did with the leases it was given.
type Restored struct {
	// Restored were put back; Present were there already (another lockd
	// put them back, or Redis kept them); Conflicts found the key held by
	// another lease, which stays; Ended had no time left.
	Restored, Present, Conflicts, Ended int
}

func (r Restored) plus(o Restored) Restored {
	return Restored{Restored: r.Restored + o.Restored, Present: r.Present + o.Present,
		Conflicts: r.Conflicts + o.Conflicts, Ended: r.Ended + o.Ended}
}

// restored is what this node put back since it started.
func (n *node) restored() Restored {
	n.restoredMu.Lock()
	defer n.restoredMu.Unlock()
	return n.restoredSum
}

// RestoredLeases counts what this process put back after Redis lost its
// data, since it started.
func (e *Engine) RestoredLeases() Restored { return e.n.restored() }

// restoreBatch bounds the restore calls of one pipeline.
const restoreBatch = 256

// restoreReason is the "restored" event's reason.
const restoreReason = "redis lost its data"

// restoreBucket puts back the live leases of the ledger in the bucket of
// marker, in pipelines of restoreBatch.
func (n *node) restoreBucket(ctx context.Context, marker string) (Restored, error) {
	leases, _ := n.ledger.live(func(key string) bool { return n.sharedOf(key).epoch == marker })
	// Tombstones first: a proof of a lease that ended may come any time.
	if err := n.writeTombstones(ctx, marker); err != nil {
		return Restored{}, err
	}
	out, err := n.restoreSessions(ctx, marker)
	if err != nil {
		return out, err
	}
	if err := n.restoreSetRecords(ctx, marker); err != nil {
		return out, err
	}
	defer func() {
		n.restoredMu.Lock()
		n.restoredSum = n.restoredSum.plus(out)
		n.restoredMu.Unlock()
	}()
	for len(leases) > 0 {
		batch := leases[:min(len(leases), restoreBatch)]
		leases = leases[len(batch):]
		got, err := n.restoreLeases(ctx, batch)
		out = out.plus(got)
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

// restoreLeases runs restore.lua for each lease, in one pipeline (twice
// when Redis lost the script, as it does with its data).
func (n *node) restoreLeases(ctx context.Context, leases []restorable) (Restored, error) {
	cmds := make([]*redis.Cmd, len(leases))
	run := func() error {
		return n.st.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, r := range leases {
				keys, argv := restoreCallOf(r.key, n.sharedOf(r.key), r, restoreReason).args()
				cmds[i] = n.scripts.restore.EvalSha(ctx, p, keys, argv...)
			}
			return nil
		})
	}
	err := run()
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		if err := n.st.Load(ctx, n.scripts.restore); err != nil {
			return Restored{}, wrap("restore", err)
		}
		err = run()
	}
	if err != nil {
		return Restored{}, wrap("restore", err)
	}
	var out Restored
	for i, c := range cmds {
		v, err := c.Slice()
		if err != nil || len(v) == 0 {
			return out, wrap("restore", fmt.Errorf("restore.lua answered %v: %w", v, err))
		}
		switch v[0] {
		case "restored":
			out.Restored++
		case "present":
			out.Present++
		case "conflict":
			// Another lease holds the key: this one ends here.
			out.Conflicts++
			n.ledger.released(leases[i].key, leases[i].token, 0)
		default:
			out.Ended++
		}
	}
	return out, nil
}

// renewRestoring is renewBy for a lease Redis may have lost with its
// data (restoring).
func (n *node) renewRestoring(ctx context.Context, key string, req RenewRequest, bySession bool) (Lease, error) {
	var l Lease
	err := n.restoring(ctx, key, req.Token, req.Proof, func() error {
		var err error
		l, err = n.renewBy(ctx, key, req, bySession)
		return err
	})
	return l, err
}

// restoring runs op, a renewal, for a lease or session Redis may have
// lost with its data: when it finds nothing, this process makes sure it
// has noticed any loss and put back what it knows (refreshEpochs) and
// runs op again; puts back a lease a failover lost (restoreOne) or one its
// holder's proof vouches for (restoreFromProof); and during the
// quarantine after a loss runs op until the lockd that knows the lease
// has put it back, as long as the call's bound allows, and then answers
// ErrRecovering rather than a loss that may not be one. key "" is a lock
// set's record: token and proof are the set's.
func (n *node) restoring(ctx context.Context, key, token, proof string, op func() error) error {
	since := time.Now()
	err := op()
	if !missing(err) || n.opts.NoQuarantine {
		return err
	}
	n.refreshSoon(ctx, since)
	if err = op(); !missing(err) {
		return err
	}
	if n.recovering() <= 0 && n.restoreOne(ctx, key, token) {
		// Redis kept its data but not this lease: a failover to a
		// replica that missed the last writes.
		return op()
	}
	if n.restoreClaim(ctx, key, token, proof, err) {
		// The lockd that knew it died with Redis's data: its holder's
		// proof is the evidence.
		return op()
	}
	if n.recovering() <= 0 {
		return err
	}
	deadline := time.Now().Add(n.opts.CallTimeout)
	for {
		left := n.recovering()
		if !time.Now().Before(deadline) {
			return &RecoveringError{Remaining: left}
		}
		select {
		case <-ctx.Done():
			return &RecoveringError{Remaining: left}
		case <-time.After(min(max(left, time.Millisecond), 100*time.Millisecond)):
		}
		if err = op(); !missing(err) || n.recovering() <= 0 {
			return err
		}
	}
}

// restoreClaim is restoreFromProof for a lease on key, and
// restoreSetFromProof for the lock set of token when key is "" (the set's
// record is what Redis lacks).
func (n *node) restoreClaim(ctx context.Context, key, token, proof string, err error) bool {
	if key == "" {
		return n.restoreSetFromProof(ctx, token, proof)
	}
	return n.restoreFromProof(ctx, key, token, proof, err)
}

// restoreOne puts back key's lease token, which this process knows, when
// Redis lacks it though its data was not lost (a failover to a replica
// that missed the last writes): only if the key's history shows neither
// its end nor a later lease (restore.lua, one). It reports whether it did.
func (n *node) restoreOne(ctx context.Context, key, token string) bool {
	if key == "" {
		return false
	}
	leases, _ := n.ledger.live(func(k string) bool { return k == key })
	for _, r := range leases {
		if r.token != token {
			continue
		}
		if time.Until(r.expires) < lapseMargin {
			// Gone at its expiry: it lapsed, and the lapse is not yet
			// recorded.
			return false
		}
		c := restoreCallOf(key, n.sharedOf(key), r, "a failover lost the grant")
		c.one = "1"
		keys, argv := c.args()
		v, err := n.st.Run(ctx, n.scripts.restore, keys, argv...)
		if err != nil {
			return false
		}
		out, _ := v.([]any)
		if len(out) > 0 && out[0] == "restored" {
			n.restoredMu.Lock()
			n.restoredSum.Restored++
			n.restoredMu.Unlock()
			return true
		}
		return false
	}
	return false
}

// lapseMargin: a lease that Redis lacks this close to its expiry, as this
// process reads it, is taken to have lapsed (the two clocks' readings of
// its expiry differ by the milliseconds of its grant's round trip), not
// lost by a failover.
const lapseMargin = 250 * time.Millisecond

// missing says whether err means that Redis has no such lease or session.
func missing(err error) bool {
	return errors.Is(err, ErrNotFound) || errors.Is(err, ErrSessionNotFound)
}

// restoreSetRecords puts back the lock sets' records this process wrote
// in the bucket of marker (SET NX: one already back stays).
func (n *node) restoreSetRecords(ctx context.Context, marker string) error {
	sets := n.ledger.liveSets(func(k string) bool { return n.sharedOf(k).epoch == marker })
	if len(sets) == 0 {
		return nil
	}
	err := n.st.Pipelined(ctx, func(p redis.Pipeliner) error {
		for token, s := range sets {
			if left := time.Until(s.expires); left > 0 {
				p.SetNX(ctx, setRecordKey(token), s.record, left)
			}
		}
		return nil
	})
	return wrap("restore lock sets", err)
}

// restoreSessions puts back the sessions of the ledger in the bucket of
// marker, with their lists of grants, in one pipeline.
func (n *node) restoreSessions(ctx context.Context, marker string) (Restored, error) {
	sessions := n.ledger.liveSessions(func(h string) bool { return n.sharedOf("sess/"+h).epoch == marker })
	if len(sessions) == 0 {
		return Restored{}, nil
	}
	var cmds []*redis.Cmd
	run := func() error {
		cmds = cmds[:0]
		return n.st.Pipelined(ctx, func(p redis.Pipeliner) error {
			for h, s := range sessions {
				left := time.Until(s.expires).Milliseconds()
				if left <= 0 {
					continue
				}
				keys, argv := sessionCall{handle: h, op: "restore", a: s.owner,
					b: fmt.Sprintf("%d %d %d", s.ttl.Milliseconds(), s.created.UnixMilli(), left)}.run(n)
				for token, id := range s.grants {
					argv = append(argv, token, id)
				}
				cmds = append(cmds, n.scripts.session.EvalSha(ctx, p, keys, argv...))
			}
			return nil
		})
	}
	err := run()
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		if err := n.st.Load(ctx, n.scripts.session); err != nil {
			return Restored{}, wrap("restore sessions", err)
		}
		err = run()
	}
	if err != nil {
		return Restored{}, wrap("restore sessions", err)
	}
	var out Restored
	for _, c := range cmds {
		v, err := c.Slice()
		if err != nil || len(v) == 0 {
			return out, wrap("restore sessions", fmt.Errorf("session.lua answered %v: %w", v, err))
		}
		if v[0] == "restored" {
			out.Restored++
		} else {
			out.Present++
		}
	}
	return out, nil
}

// validateLedger drops from the ledger the leases of the bucket of marker
// (whose id this process saw) that Redis no longer holds: released,
// broken or replaced through another lockd; and puts back an exclusive
// lease that Redis lacks with no trace of its end (restoreOne). It runs with every refresh,
// so a lease that ended more than a refresh before a loss is not put
// back; one that ended within the refresh before is, and holds its key
// until its own expiry (no overlap: its fence is below any later grant's,
// which wins a conflict).
func (n *node) validateLedger(ctx context.Context, marker, id string) {
	leases, _ := n.ledger.live(func(key string) bool { return n.sharedOf(key).epoch == marker })
	for len(leases) > 0 {
		batch := leases[:min(len(leases), restoreBatch)]
		leases = leases[len(batch):]
		keys := make([]string, 0, len(batch)+1)
		argv := make([]any, 0, 3*len(batch)+1)
		keys, argv = append(keys, marker), append(argv, id)
		for _, r := range batch {
			keys, argv = append(keys, keysOf(r.key).lease), append(argv, r.mode, r.token, strconv.FormatInt(r.fence, 10))
		}
		v, err := n.st.Run(ctx, n.scripts.validate, keys, argv...)
		if err != nil {
			return
		}
		held, ok := v.([]any)
		if !ok || len(held) != len(batch)+1 || held[0] != "ok" {
			return
		}
		for i, r := range batch {
			switch h, _ := held[i+1].(int64); h {
			case 0:
				n.ledger.drop(r.key, r.token, r.expires)
			case 2:
				// Gone with no trace of its end: a write a failover lost.
				n.restoreOne(ctx, r.key, r.token)
			}
		}
	}
}
