package lock

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// A lock set with keys in several Cluster slots is granted slot by slot:
// one script call per slot, the last slot's first, then the others at
// once (acquireSet). Between the first grant and the last the set holds
// some of its keys and not yet the others, and nobody may see that. So
// before its first grant the set writes its record marked gathering
// (with a TTL of gatherFor), each grant marks its key with the record's
// id (exclusive.lua's set_mark, for as long), and once every slot has
// granted, the record is written without the mark: that write is the
// moment the set holds its keys. Until it, a reader of a marked key (a
// state, a list, a refused acquire) asks the record and takes a grant of
// a set still gathering for the set's place in the queue, not for a
// holder. A lockd that dies while its set gathers leaves a record that
// lapses within gatherFor: its grants show from then on, as any grant
// whose holder never learnt of it (until their TTL).

// gatherFor is how long a set's grants may take after its record is
// written: the last slot's call, the others' (at once) and the record's
// second write, each bounded by the call timeout.
func (n *node) gatherFor() time.Duration { return 3*n.opts.CallTimeout + time.Second }

// recordID is the id of a set's record in its keys' marks: the part of
// setRecordKey after the prefix, a hash of the token.
func recordID(token string) string { return setRecordKey(token)[len(setRecordKeyPrefix):] }

// writeGathering writes the record of a set about to be granted slot by
// slot, marked gathering, with a TTL of gatherFor.
func (n *node) writeGathering(ctx context.Context, s *setTry) error {
	b, err := json.Marshal(setRecord{Keys: s.req.Keys, Owner: s.req.Owner, TTLMS: s.req.TTL.Milliseconds(), Gathering: true})
	if err != nil {
		return err
	}
	ctx, cancel := n.bound(ctx)
	defer cancel()
	if err := n.st.Cmd().Set(ctx, setRecordKey(s.token), b, n.gatherFor()).Err(); err != nil {
		return wrap("lock set", err)
	}
	return nil
}

// setMarks are a key's marks of lock sets' grants (state.lua's reply ends
// with them): fence → the id of the set's record.
type setMarks map[int64]string

// marksFrom reads the marks at r's index i, if the reply has them.
func marksFrom(r *reply, i int) setMarks {
	if i >= r.len() {
		return nil
	}
	m, err := newReply(r.vals[i])
	if err != nil {
		r.fail(err)
		return nil
	}
	marks := setMarks{}
	for j := 0; j+1 < m.len(); j += 2 {
		marks[m.int(j)] = m.str(j + 1)
	}
	return marks
}

// gathering answers which of the records (ids) are of sets still
// gathering their keys. A record that is gone is not: the set was
// released since the caller read its grant, or its lockd died and the
// mark outlived the record by a moment.
func (n *node) gathering(ctx context.Context, ids []string) (map[string]bool, error) {
	ctx, cancel := n.bound(ctx)
	defer cancel()
	cmds := make([]*redis.StringCmd, len(ids))
	_, err := n.st.Cmd().Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			cmds[i] = p.Get(ctx, setRecordKeyPrefix+id)
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, wrap("lock set", err)
	}
	out := map[string]bool{}
	for i, cmd := range cmds {
		var r setRecord
		if b, err := cmd.Bytes(); err == nil && json.Unmarshal(b, &r) == nil && r.Gathering {
			out[ids[i]] = true
		}
	}
	return out, nil
}

// hideGathering takes out of states (with their marks, one per state) the
// grants of sets still gathering their keys; a state left with no holder
// is dropped.
func (n *node) hideGathering(ctx context.Context, states []State, marks []setMarks) ([]State, error) {
	var ids []string
	for _, m := range marks {
		for _, id := range m {
			if !slices.Contains(ids, id) {
				ids = append(ids, id)
			}
		}
	}
	if len(ids) == 0 {
		return states, nil
	}
	gathering, err := n.gathering(ctx, ids)
	if err != nil {
		return nil, err
	}
	out := states[:0]
	for i, s := range states {
		if hideGrants(&s, marks[i], gathering) {
			out = append(out, s)
		}
	}
	return out, nil
}

// hideGrants takes out of s the holders whose marks name a gathering
// record, and says whether anyone is left.
func hideGrants(s *State, marks setMarks, gathering map[string]bool) bool {
	hidden := func(h Holder) bool { id, ok := marks[h.Fence]; return ok && gathering[id] }
	before := len(s.Holders)
	s.Holders = slices.DeleteFunc(s.Holders, hidden)
	if len(s.Holders) == before {
		return true
	}
	s.HoldersTotal -= before - len(s.Holders)
	if len(s.Holders) == 0 {
		return false
	}
	// The fields of the state describe the newest holder left.
	h := slices.MaxFunc(s.Holders, func(a, b Holder) int { return cmp.Compare(a.Fence, b.Fence) })
	s.Owner, s.Fence, s.Count, s.TTL, s.AcquiredAt, s.ExpiresAt, s.Remaining, s.Value =
		h.Owner, h.Fence, h.Count, h.TTL, h.AcquiredAt, h.ExpiresAt, h.Remaining, h.Value
	s.AtRisk = atRisk(*s)
	return true
}

// heldByGathering turns a refusal by a lock set's grant (HeldError, whose
// set is named by the mark rec) into what it is while that set gathers
// its keys: the set's place first in the queue.
func (n *node) heldByGathering(ctx context.Context, he *HeldError, rec string) error {
	g, err := n.gathering(ctx, []string{rec})
	if err != nil || !g[rec] {
		return he
	}
	return &QueuedError{Resource: he.Resource, Waiters: 1, Next: Waiter{Owner: he.Owner},
		RetryAfter: min(he.Remaining, queuedRetry)}
}

// markOf is the n-th field of a reply when present: a mark's record id.
func markOf(r *reply, i int) string {
	if i < r.len() {
		return r.str(i)
	}
	return ""
}

// markFor is the lifetime of a gathering set's marks, in ms, for
// lockset.lua: "" for a set in one slot (rec "").
func markFor(rec string, d time.Duration) string {
	if rec == "" {
		return ""
	}
	return strconv.FormatInt(d.Milliseconds(), 10)
}

// heldBack finds, in the outbox events one Cluster sweep returned ({bucket,
// {id, fields}}, flat: relay), the grants of lock sets still gathering
// their keys: nobody learns of such a grant before the set holds all its
// keys. It answers, per bucket, 1 + the index in l of the first such
// event; relay leaves it and the bucket's later events in the outbox, for
// a later sweep (the bucket is noted again).
func (n *node) heldBack(ctx context.Context, l []any) (map[string]int, error) {
	type grant struct {
		at     int
		bucket string
		mark   *redis.StringCmd
	}
	var grants []grant
	for i := 0; i+1 < len(l); i += 2 {
		bucket, _ := l[i].(string)
		entry, _ := l[i+1].([]any)
		if len(entry) != 2 {
			continue
		}
		fields, _ := entry[1].([]any)
		f := map[string]string{}
		for j := 0; j+1 < len(fields); j += 2 {
			k, _ := fields[j].(string)
			v, _ := fields[j+1].(string)
			f[k] = v
		}
		if f["type"] == "acquired" && f["set"] != "" && f["key"] != "" {
			grants = append(grants, grant{at: i, bucket: bucket, mark: redis.NewStringCmd(ctx, "HGET", setMarkKey(f["key"]), f["fence"])})
		}
	}
	if len(grants) == 0 {
		return nil, nil
	}
	ctx, cancel := n.bound(ctx)
	defer cancel()
	_, err := n.st.Cmd().Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, g := range grants {
			_ = p.Process(ctx, g.mark)
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, wrap("events", err)
	}
	var ids []string
	for _, g := range grants {
		if id, err := g.mark.Result(); err == nil && !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return nil, nil
	}
	gathering, err := n.gathering(ctx, ids)
	if err != nil {
		return nil, err
	}
	held := map[string]int{}
	var again []string
	for _, g := range grants {
		if id, err := g.mark.Result(); err == nil && gathering[id] && held[g.bucket] == 0 {
			held[g.bucket] = g.at + 1
			again = append(again, g.bucket)
		}
	}
	n.giveNotes(again)
	return held, nil
}

// setMarkKey is the Redis key of a lock's set marks (exclusive.lua's
// set_mark: the lease's sibling "setmark").
func setMarkKey(key string) string { return keyPrefix + "{" + key + "}:setmark" }
