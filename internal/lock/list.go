package lock

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Page is one page of live locks.
type Page struct {
	Locks []State
	// NextCursor continues the listing; empty on the last page.
	NextCursor string
}

const (
	// scanBudget is about how many Redis keys one List call may visit.
	scanBudget = 200_000
	// maxScanCount caps the COUNT hint of one SCAN call.
	maxScanCount = 10_000
)

// cursor is the opaque list cursor: where SCAN stands, and the lock keys
// that SCAN already returned but that did not fit on the previous page.
type cursor struct {
	Scan    uint64   `json:"s"`
	Pending []string `json:"p,omitempty"`
}

// List returns up to limit live locks whose key starts with prefix, walking
// Redis with SCAN (never KEYS). Every lock live for the whole iteration is
// returned once: keys SCAN returned beyond the page travel in the cursor.
// A page may be short, even empty, with a cursor: the walk stops after a
// budget of keys so that one call stays fast whatever the keyspace.
func (e *Engine) List(ctx context.Context, prefix string, limit int, after string) (Page, error) {
	cur, err := decodeCursor(after)
	if err != nil {
		return Page{}, err
	}
	match := keyPrefix + "{" + escapeGlob(prefix) + "*}:lease"
	seen := map[string]bool{}
	keys := make([]string, 0, limit)
	add := func(k string) {
		if !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	for _, k := range cur.Pending {
		if !strings.HasPrefix(k, prefix) {
			return Page{}, fmt.Errorf("%w: key outside the prefix", ErrInvalidCursor)
		}
		add(k)
	}
	// COUNT starts near what the page still needs (each lock has about three
	// Redis keys) so a batch rarely overflows into the cursor, and doubles
	// while batches come back empty, so a rare prefix is found quickly.
	// The scan budget keeps one request short with millions of keys: past
	// it the page is returned short, with a cursor to go on.
	first, count, scanned := after == "", int64(0), int64(0)
	for (first || cur.Scan != 0) && len(keys) < limit && scanned < scanBudget {
		first = false
		if need := int64(max(limit-len(keys), 10) * 3); count < need {
			count = need
		}
		batch, next, err := e.rdb.Scan(ctx, cur.Scan, match, count).Result()
		if err != nil {
			return Page{}, wrap("list", err)
		}
		cur.Scan = next
		scanned += count
		if len(batch) == 0 {
			count = min(count*2, maxScanCount)
		} else {
			count = 0
		}
		// SCAN's batch order is arbitrary; sort it so that a page reads well.
		slices.Sort(batch)
		for _, rk := range batch {
			if k := lockKeyOf(rk); k != "" {
				add(k)
			}
		}
	}
	cur.Pending = nil
	if len(keys) > limit {
		cur.Pending = keys[limit:]
		keys = keys[:limit]
	}
	locks, err := e.states(ctx, keys)
	if err != nil {
		return Page{}, err
	}
	page := Page{Locks: locks}
	if cur.Scan != 0 || len(cur.Pending) > 0 {
		page.NextCursor = encodeCursor(cur)
	}
	return page, nil
}

// states reads many locks in one pipeline; locks that lapsed since SCAN saw
// them are left out.
func (e *Engine) states(ctx context.Context, keys []string) ([]State, error) {
	if len(keys) == 0 {
		return []State{}, nil
	}
	run := func() ([]*redis.Cmd, error) {
		cmds := make([]*redis.Cmd, len(keys))
		_, err := e.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, key := range keys {
				k := keysOf(key)
				cmds[i] = e.scripts.state.EvalSha(ctx, p, []string{k.lease, k.waiters})
			}
			return nil
		})
		return cmds, err
	}
	cmds, err := run()
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		if err := e.scripts.state.Load(ctx, e.rdb).Err(); err != nil {
			return nil, wrap("list", err)
		}
		cmds, err = run()
	}
	if err != nil {
		return nil, wrap("list", err)
	}
	out := make([]State, 0, len(keys))
	for i, cmd := range cmds {
		s, err := stateFrom(keys[i], cmd.Val())
		if err == ErrNotFound {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// lockKeyOf is the lock key of a lease's Redis key.
func lockKeyOf(redisKey string) string {
	rest, ok := strings.CutPrefix(redisKey, keyPrefix+"{")
	if !ok {
		return ""
	}
	key, ok := strings.CutSuffix(rest, "}:lease")
	if !ok {
		return ""
	}
	return key
}

// escapeGlob escapes the characters that SCAN MATCH treats as a pattern.
func escapeGlob(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch r {
		case '*', '?', '[', ']', '\\', '^', '-':
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

func encodeCursor(c cursor) string {
	b, _ := json.Marshal(c)
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeCursor(s string) (cursor, error) {
	var c cursor
	if s == "" {
		return c, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return c, fmt.Errorf("%w: %w", ErrInvalidCursor, err)
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("%w: %w", ErrInvalidCursor, err)
	}
	return c, nil
}
