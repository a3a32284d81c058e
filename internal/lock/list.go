package lock

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockd/lockd/internal/lock/store"
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

// cursor is the list cursor: where SCAN stands, and the lock keys that
// SCAN already returned but that did not fit on the previous page. Those
// may lie outside the prefixes of the caller's API key (a listing broader
// than its prefixes is filtered row by row after List), so the cursor is
// handed out encrypted: it reveals nothing, and a forged one is refused.
type cursor struct {
	Scan    store.ScanPos `json:"w"`
	Pending []string      `json:"p,omitempty"`
}

// List returns up to limit live locks whose key starts with prefix, walking
// Redis with SCAN (never KEYS). Every lock live for the whole iteration is
// returned once: keys SCAN returned beyond the page travel in the cursor.
// A page may be short, even empty, with a cursor: the walk stops after a
// budget of keys so that one call stays fast whatever the keyspace.
func (e *Engine) List(ctx context.Context, kind Kind, prefix string, limit int, after string) (Page, error) {
	// The prefix is the start of a name; within the Redis key names
	// (Resource.id) the kind's own part comes first.
	within := Resource{Kind: kind, Name: prefix}
	if err := within.check(); err != nil {
		return Page{}, err
	}
	return e.n.list(ctx, within.id(), limit, after)
}

// list is List within prefix, a resource's part of the Redis key names.
func (n *node) list(ctx context.Context, prefix string, limit int, after string) (Page, error) {
	cur, err := n.decodeCursor(ctx, after)
	if err != nil {
		return Page{}, err
	}
	match := leaseMatch(prefix)
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
	count, scanned := int64(0), int64(0)
	for !cur.Scan.Done && len(keys) < limit && scanned < scanBudget {
		if need := int64(max(limit-len(keys), 10) * 3); count < need {
			count = need
		}
		batch, next, err := n.scan(ctx, cur.Scan, match, count)
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
			if k := lockKeyOf(rk); listed(k, prefix) {
				add(k)
			}
		}
	}
	cur.Pending = nil
	if len(keys) > limit {
		cur.Pending = keys[limit:]
		keys = keys[:limit]
	}
	locks, err := n.states(ctx, keys)
	if err != nil {
		return Page{}, err
	}
	page := Page{Locks: locks}
	if !cur.Scan.Done || len(cur.Pending) > 0 {
		if page.NextCursor, err = n.encodeCursor(ctx, cur); err != nil {
			return Page{}, err
		}
	}
	return page, nil
}

// states reads many locks in one pipeline; locks that lapsed since SCAN saw
// them are left out.
func (n *node) states(ctx context.Context, keys []string) ([]State, error) {
	if len(keys) == 0 {
		return []State{}, nil
	}
	run := func() ([]*redis.Cmd, error) {
		cmds := make([]*redis.Cmd, len(keys))
		err := n.st.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, key := range keys {
				cmds[i] = n.scripts.state.EvalSha(ctx, p, n.stateKeys(key))
			}
			return nil
		})
		return cmds, err
	}
	cmds, err := run()
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		if err := n.st.Load(ctx, n.scripts.state); err != nil {
			return nil, wrap("list", err)
		}
		cmds, err = run()
	}
	if err != nil {
		return nil, wrap("list", err)
	}
	out := make([]State, 0, len(keys))
	marks := make([]setMarks, 0, len(keys))
	for i, cmd := range cmds {
		s, m, err := stateFrom(keys[i], cmd.Val())
		if err == ErrNotFound {
			continue
		}
		if err != nil {
			return nil, err
		}
		out, marks = append(out, s), append(marks, m)
	}
	return n.hideGathering(ctx, out, marks)
}

// scan runs one SCAN step of a walk over the node's masters (store.Scan).
func (n *node) scan(ctx context.Context, pos store.ScanPos, match string, count int64) ([]string, store.ScanPos, error) {
	return n.st.Scan(ctx, pos, match, count)
}

// listed says whether a listing of prefix shows key: a listing of locks
// leaves semaphores out (with no prefix, SCAN matches both).
func listed(key, prefix string) bool {
	if key == "" {
		return false
	}
	return resourceOf(key).Kind == resourceOf(prefix).Kind
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

// cursorKeyTTL is how long a process uses the secret it read before it
// reads it again: should Redis lose it (a restart without persistence, a
// flush), replicas agree on the new one within this time.
const cursorKeyTTL = time.Minute

// cursorKey is a node's cursor cipher and when it was made, so that
// List reads the secret once a minute rather than on every call.
type cursorKey struct {
	mu   sync.Mutex
	aead cipher.AEAD
	at   time.Time
}

// cursorAEAD is the cipher of cursors: AES-256-GCM under SHA-256 of the
// shared secret. refresh reads the secret again, for a cursor that the
// cached key does not open.
func (n *node) cursorAEAD(ctx context.Context, refresh bool) (cipher.AEAD, error) {
	n.cursorKey.mu.Lock()
	cached, at := n.cursorKey.aead, n.cursorKey.at
	n.cursorKey.mu.Unlock()
	if cached != nil && !refresh && time.Since(at) < cursorKeyTTL {
		return cached, nil
	}
	secret, err := n.st.Cmd().Get(ctx, cursorSecretKey).Result()
	if errors.Is(err, redis.Nil) {
		// The first replica to list creates the secret; SETNX makes every
		// other one read the same.
		b := make([]byte, 32)
		_, _ = rand.Read(b)
		if err := n.st.Cmd().SetNX(ctx, cursorSecretKey, base64.RawURLEncoding.EncodeToString(b), 0).Err(); err != nil {
			return nil, wrap("list", err)
		}
		secret, err = n.st.Cmd().Get(ctx, cursorSecretKey).Result()
	}
	if err != nil {
		return nil, wrap("list", err)
	}
	sum := sha256.Sum256([]byte("lockd list cursor v1\x00" + secret))
	block, err := aes.NewCipher(sum[:])
	if err != nil {
		return nil, fmt.Errorf("lock: cursor key: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("lock: cursor key: %w", err)
	}
	n.cursorKey.mu.Lock()
	n.cursorKey.aead, n.cursorKey.at = aead, time.Now()
	n.cursorKey.mu.Unlock()
	return aead, nil
}

func (n *node) encodeCursor(ctx context.Context, c cursor) (string, error) {
	aead, err := n.cursorAEAD(ctx, false)
	if err != nil {
		return "", err
	}
	plain, _ := json.Marshal(c)
	nonce := make([]byte, aead.NonceSize(), aead.NonceSize()+len(plain)+aead.Overhead())
	_, _ = rand.Read(nonce)
	return base64.RawURLEncoding.EncodeToString(aead.Seal(nonce, nonce, plain, nil)), nil
}

func (n *node) decodeCursor(ctx context.Context, s string) (cursor, error) {
	var c cursor
	if s == "" {
		return c, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return c, fmt.Errorf("%w: %w", ErrInvalidCursor, err)
	}
	var plain []byte
	for _, refresh := range []bool{false, true} {
		aead, err := n.cursorAEAD(ctx, refresh)
		if err != nil {
			return c, err
		}
		if len(b) < aead.NonceSize() {
			return c, fmt.Errorf("%w: too short", ErrInvalidCursor)
		}
		if plain, err = aead.Open(nil, b[:aead.NonceSize()], b[aead.NonceSize():], nil); err == nil {
			break
		}
		if refresh {
			// Not ours, altered, or made before Redis lost the secret.
			return c, fmt.Errorf("%w: %w", ErrInvalidCursor, err)
		}
	}
	if err := json.Unmarshal(plain, &c); err != nil {
		return c, fmt.Errorf("%w: %w", ErrInvalidCursor, err)
	}
	return c, nil
}
