package lock

import (
	"maps"
	"strconv"
	"sync"
	"time"
)

// ledger is what this process knows of the leases it granted or last
// renewed and that may still be live: enough to put each back as it was
// should Redis lose its data (restore.go). It is noted from the answers
// Redis gave (fence, count, expiry) and the requests that got them (owner,
// value, session, lock-delay), and forgets a lease at its release or once
// its expiry has passed: its size is bounded by the live leases this
// process granted or renewed, about 300 bytes each plus the value.
type ledger struct {
	mu       sync.Mutex
	leases   map[string]map[string]*known // key → token → lease
	sessions map[string]*knownSession     // handle → session
	// ended are the leases released or broken through this process
	// while they had time left: key → token → the expiry they had. After a
	// loss they are written back as tombstones, so that a holder's proof
	// of one restores nothing (restore.go).
	ended map[string]map[string]time.Time
	// sets are the lock sets' records this process wrote: token → the
	// record (JSON) and until when it lives.
	sets map[string]knownSet
}

// knownSet is a lock set's record as this process last wrote it.
type knownSet struct {
	record  []byte
	expires time.Time
}

// setSeen records the lock set record of token written to live until
// expires; a nil record forgets it (the set was released).
func (lg *ledger) setSeen(token string, record []byte, expires time.Time) {
	lg.mu.Lock()
	defer lg.mu.Unlock()
	if record == nil {
		delete(lg.sets, token)
		return
	}
	if lg.sets == nil {
		lg.sets = map[string]knownSet{}
	}
	lg.sets[token] = knownSet{record: record, expires: expires}
}

// liveSets drops the set records whose time has passed and answers the
// others whose record key is in, by token.
func (lg *ledger) liveSets(in func(recordKey string) bool) map[string]knownSet {
	lg.mu.Lock()
	defer lg.mu.Unlock()
	now := time.Now()
	out := map[string]knownSet{}
	for token, k := range lg.sets {
		if !k.expires.After(now) {
			delete(lg.sets, token)
			continue
		}
		if in(setRecordKey(token)) {
			out[token] = k
		}
	}
	return out
}

// knownSession is a session of the ledger: its record and its grants
// (token → resource id), as session.lua keeps them.
type knownSession struct {
	owner   string
	ttl     time.Duration
	created time.Time
	expires time.Time
	grants  map[string]string
}

// sessionSeen records what op of session.lua answered (r) for the session
// with handle h, sent at sent; a, b are the op's arguments.
func (lg *ledger) sessionSeen(h, op, a, b string, r sessionReply, sent time.Time) {
	lg.mu.Lock()
	defer lg.mu.Unlock()
	if lg.sessions == nil {
		lg.sessions = map[string]*knownSession{}
	}
	if op == "end" {
		delete(lg.sessions, h)
		return
	}
	k := lg.sessions[h]
	if k == nil {
		if op != "create" && op != "renew" {
			return
		}
		k = &knownSession{grants: map[string]string{}}
		lg.sessions[h] = k
	}
	k.expires = sent.Add(r.expiresAt.Sub(r.now))
	switch op {
	case "create":
		k.owner, k.created = a, r.now
		if ms, err := strconv.ParseInt(b, 10, 64); err == nil {
			k.ttl = time.Duration(ms) * time.Millisecond
		}
	case "renew":
		k.owner, k.ttl, k.created = r.owner, r.ttl, r.createdAt
		clear(k.grants)
		for _, g := range r.grants {
			k.grants[g.token] = g.id
		}
	case "attach":
		k.grants[b] = a
	case "detach":
		delete(k.grants, b)
	}
}

// liveSessions drops the sessions whose expiry has passed and answers
// those left whose handle is in (a copy of each).
func (lg *ledger) liveSessions(in func(handle string) bool) map[string]knownSession {
	lg.mu.Lock()
	defer lg.mu.Unlock()
	now := time.Now()
	out := map[string]knownSession{}
	for h, k := range lg.sessions {
		if !k.expires.After(now) {
			delete(lg.sessions, h)
			continue
		}
		if in(h) {
			c := *k
			c.grants = maps.Clone(k.grants)
			out[h] = c
		}
	}
	return out
}

// known is one lease of the ledger. Its expiry is this process's reading,
// taken before the request that set it was sent: never later than the
// one Redis keeps.
type known struct {
	mode     string // "x", "s" or "p" (modeArg)
	owner    string
	fence    int64
	count    int
	ttl      time.Duration
	acquired time.Time
	expires  time.Time
	limit    int
	delay    time.Duration
	value    string
	session  string // the handle of the session it is bound to
	set      int    // the size of the lock set it was granted in (0: none)
}

// note records a grant or re-entry of key (l, what Redis answered: left
// to live) for req, asked at sent.
func (lg *ledger) note(key string, l Lease, left time.Duration, req AcquireRequest, sent time.Time) {
	lg.mu.Lock()
	defer lg.mu.Unlock()
	k := lg.entry(key, l.Token)
	k.mode, k.owner, k.fence, k.count, k.ttl, k.acquired = modeName(l.Mode), l.Owner, l.Fence, l.Count, l.TTL, l.AcquiredAt
	k.expires, k.limit = sent.Add(left), l.Limit
	if req.Value != "" || req.Token == "" {
		// A re-entry without a value keeps the grant's (acquire.lua).
		k.value = req.Value
	}
	if req.Token == "" {
		k.delay, k.session = req.LockDelay, req.sessionHandle
	}
}

// inSet marks key's lease token as granted in a lock set of size keys,
// which a restore puts back with it.
func (lg *ledger) inSet(key, token string, size int) {
	lg.mu.Lock()
	defer lg.mu.Unlock()
	if k := lg.leases[key][token]; k != nil {
		k.set = size
	}
}

// fill adds what a waiter's request says to key's lease token, handed to
// it by a release (which knew only the grant).
func (lg *ledger) fill(key, token string, req AcquireRequest) {
	lg.mu.Lock()
	defer lg.mu.Unlock()
	if k := lg.leases[key][token]; k != nil {
		k.value, k.delay, k.session = req.Value, req.LockDelay, req.sessionHandle
	}
}

// renewed records a renewal of key (l, left to live) that set value (""
// keeps it), sent at sent.
func (lg *ledger) renewed(key string, l Lease, left time.Duration, value string, sent time.Time) {
	lg.mu.Lock()
	defer lg.mu.Unlock()
	k := lg.entry(key, l.Token)
	if k.mode == "" {
		// Granted through another lockd: what renew answers is all there is.
		k.mode, k.owner, k.acquired = modeName(l.Mode), l.Owner, l.AcquiredAt
	}
	k.fence, k.count, k.ttl, k.limit = l.Fence, l.Count, l.TTL, l.Limit
	k.expires = sent.Add(left)
	if value != "" {
		k.value = value
	}
}

// released records a release of key's lease token that left count
// levels.
func (lg *ledger) released(key, token string, count int) {
	lg.mu.Lock()
	defer lg.mu.Unlock()
	if count > 0 {
		if k := lg.leases[key][token]; k != nil {
			k.count = count
		}
		return
	}
	lg.end(key, token)
}

// end forgets key's lease token, ended by its holder or an operator, and
// keeps its tombstone until the expiry it had. Called with lg.mu.
func (lg *ledger) end(key, token string) {
	k := lg.leases[key][token]
	if k == nil {
		// Granted and renewed through other lockds: its expiry, and so
		// how long a proof of it may vouch, is theirs to know.
		return
	}
	until := k.expires
	lg.forget(key, token)
	if !until.After(time.Now()) {
		return
	}
	if lg.ended == nil {
		lg.ended = map[string]map[string]time.Time{}
	}
	m := lg.ended[key]
	if m == nil {
		m = map[string]time.Time{}
		lg.ended[key] = m
	}
	m[token] = until
}

// tombstones answers the ended leases of the keys in, with how long each
// has left, dropping those whose time has passed.
func (lg *ledger) tombstones(in func(key string) bool) []restorable {
	lg.mu.Lock()
	defer lg.mu.Unlock()
	now := time.Now()
	var out []restorable
	for key, m := range lg.ended {
		for token, until := range m {
			if !until.After(now) {
				delete(m, token)
				continue
			}
			if in(key) {
				out = append(out, restorable{key: key, token: token, known: known{expires: until}})
			}
		}
		if len(m) == 0 {
			delete(lg.ended, key)
		}
	}
	return out
}

// isEnded says whether this process saw key's lease token end.
func (lg *ledger) isEnded(key, token string) bool {
	lg.mu.Lock()
	defer lg.mu.Unlock()
	until, ok := lg.ended[key][token]
	return ok && until.After(time.Now())
}

// drop forgets key's lease token if it is still the one read (expires
// unchanged): a renewal since then says it lives.
func (lg *ledger) drop(key, token string, expires time.Time) {
	lg.mu.Lock()
	defer lg.mu.Unlock()
	if k := lg.leases[key][token]; k != nil && k.expires.Equal(expires) {
		lg.forget(key, token)
	}
}

// broken records that a force-release broke key's lease with fence.
func (lg *ledger) broken(key string, fence int64) {
	lg.mu.Lock()
	defer lg.mu.Unlock()
	for token, k := range lg.leases[key] {
		if k.fence == fence {
			lg.end(key, token)
		}
	}
}

// forget drops key's lease token. Called with lg.mu.
func (lg *ledger) forget(key, token string) {
	m := lg.leases[key]
	delete(m, token)
	if len(m) == 0 {
		delete(lg.leases, key)
	}
}

// entry is key's lease token, made if new. Called with lg.mu.
func (lg *ledger) entry(key, token string) *known {
	if lg.leases == nil {
		lg.leases = map[string]map[string]*known{}
	}
	m := lg.leases[key]
	if m == nil {
		m = map[string]*known{}
		lg.leases[key] = m
	}
	k := m[token]
	if k == nil {
		k = &known{}
		m[token] = k
	}
	return k
}

// restorable is one lease to put back: its key and token, and a copy.
type restorable struct {
	key, token string
	known
}

// live drops the leases whose expiry has passed and answers those left of
// the keys in (nil: every key), with how long the last of them has left.
func (lg *ledger) live(in func(key string) bool) ([]restorable, time.Duration) {
	lg.mu.Lock()
	defer lg.mu.Unlock()
	now := time.Now()
	var out []restorable
	var last time.Duration
	for key, m := range lg.leases {
		for token, k := range m {
			if !k.expires.After(now) {
				lg.forget(key, token)
				continue
			}
			if in != nil && !in(key) {
				continue
			}
			out = append(out, restorable{key: key, token: token, known: *k})
			last = max(last, k.expires.Sub(now))
		}
	}
	return out, last
}

// lastBy drops the leases whose expiry has passed and answers, per
// bucket (bucketOf a key), how long the last live one has left.
func (lg *ledger) lastBy(bucketOf func(key string) string) map[string]time.Duration {
	lg.mu.Lock()
	defer lg.mu.Unlock()
	now := time.Now()
	out := map[string]time.Duration{}
	for key, m := range lg.leases {
		for token, k := range m {
			left := k.expires.Sub(now)
			if left <= 0 {
				lg.forget(key, token)
				continue
			}
			b := bucketOf(key)
			out[b] = max(out[b], left)
		}
	}
	for key, m := range lg.ended {
		for token, until := range m {
			if !until.After(now) {
				delete(m, token)
			}
		}
		if len(m) == 0 {
			delete(lg.ended, key)
		}
	}
	for token, k := range lg.sets {
		if !k.expires.After(now) {
			delete(lg.sets, token)
		}
	}
	for h, k := range lg.sessions {
		left := k.expires.Sub(now)
		if left <= 0 {
			delete(lg.sessions, h)
			continue
		}
		b := bucketOf("sess/" + h)
		out[b] = max(out[b], left)
	}
	return out
}

// has says whether the ledger knows key's lease token, live.
func (lg *ledger) has(key, token string) bool {
	lg.mu.Lock()
	defer lg.mu.Unlock()
	k := lg.leases[key][token]
	return k != nil && k.expires.After(time.Now())
}

// modeName is the scripts' mode of m (modeOf's inverse).
func modeName(m Mode) string {
	switch m {
	case Shared:
		return "s"
	case Permit:
		return "p"
	default:
		return "x"
	}
}
