package lock

import "strings"

// The Redis key layout, in one place (scripts/lib/base.lua's sibling and lock_of read
// the same shape). Each lock K has keys lockd:{K}:<part>: the hash tag
// puts them in one Cluster slot, so one script may touch them all. The
// shared keys of a bucket (one server or Sentinel: lockd:<name>; a
// Cluster slot: lockd:{<slot tag>}:<name>) hold what spans keys: the
// expiry schedule, the event stream or outbox, the replicas' liveness,
// the epoch marker, the sweeper lease and due list, the /readyz probe.

const keyPrefix = "lockd:"

// keys names the Redis keys of one lock. The {hash tag} puts them in one
// Cluster slot so a script may touch them all.
type keys struct {
	lease, fence, hist, renewals, wake string
	// queue and qinfo are the wait queue (scripts/lib/queue.lua); holders the shared
	// holders or permits by expiry.
	queue, qinfo, holders string
}

func keysOf(key string) keys {
	// One allocation for all the names: each is a slice of one string.
	base := len(keyPrefix) + len(key) + 3
	var b strings.Builder
	b.Grow(8*base + len("leasefencehistoryrenewedwakequeueqinfoholders"))
	name := func(suffix string) (start, end int) {
		start = b.Len()
		b.WriteString(keyPrefix)
		b.WriteByte('{')
		b.WriteString(key)
		b.WriteString("}:")
		b.WriteString(suffix)
		return start, b.Len()
	}
	var at [8][2]int
	for i, suffix := range [8]string{"lease", "fence", "history", "renewed", "wake", "queue", "qinfo", "holders"} {
		at[i][0], at[i][1] = name(suffix)
	}
	all := b.String()
	k := func(i int) string { return all[at[i][0]:at[i][1]] }
	return keys{lease: k(0), fence: k(1), hist: k(2), renewals: k(3), wake: k(4), queue: k(5), qinfo: k(6), holders: k(7)}
}

// keyOfChannel is the lock key of a wake channel, or "" for another channel.
func keyOfChannel(ch string) string {
	rest, ok := strings.CutPrefix(ch, keyPrefix+"{")
	if !ok {
		return ""
	}
	key, ok := strings.CutSuffix(rest, "}:wake")
	if !ok {
		return ""
	}
	return key
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

// leaseMatch is the SCAN pattern of the lease keys of every lock under
// prefix.
func leaseMatch(prefix string) string {
	return keyPrefix + "{" + escapeGlob(prefix) + "*}:lease"
}

// bucketOf is the prefix of a bucket's shared keys: "" for the one
// bucket of a server or Sentinel, else a Cluster slot's tag.
func bucketOf(tag string) string {
	if tag == "" {
		return keyPrefix
	}
	return keyPrefix + "{" + tag + "}:"
}

// sharedKeys names the keys a key's scripts write beside the key's own:
// its bucket's expiry schedule, event stream (a Cluster slot's outbox) and
// replica liveness set, and the epoch marker. They are made once per
// bucket, not on every call.
type sharedKeys struct {
	expiries, events, replicas, epoch string
}

func newShared(tag string) *sharedKeys {
	b := bucketOf(tag)
	return &sharedKeys{expiries: b + "expiries", events: b + "events", replicas: b + "replicas", epoch: b + "epoch"}
}

// eventStreamKey is the shared event stream's key (a Cluster's is fed from
// the slots' outboxes, events.go).
func eventStreamKey(sharded bool) string {
	if sharded {
		return keyPrefix + "{events}:all"
	}
	return keyPrefix + "events"
}

// readyKey is written by Ready: on a Cluster one per master, in one of its
// slots (tag). It is outside every lock's key space (lockd:{KEY}:…), so no
// listing or script ever sees it.
func readyKey(tag string) string {
	if tag == "" {
		return keyPrefix + "readyz"
	}
	return keyPrefix + "{" + tag + "}:readyz"
}

// cursorSecretKey holds the secret from which cursors' encryption key is
// derived. It lives in Redis so that every replica on the same Redis
// accepts the others' cursors with no configuration; whoever can read it
// can read every lease anyway. It is outside every lock's key space.
const cursorSecretKey = keyPrefix + "cursor-secret"

// redlockSweeperKey is the Redlock sweeper lease, on every master. It is no
// lock key (those are lockd:{key}:…), so no list shows it.
const redlockSweeperKey = keyPrefix + "redlock:sweeper"
