// Package auth holds lockd's API keys: who a bearer key belongs to, which
// scopes it has and which lock keys it may touch.
//
// Keys come from a YAML file (--auth-file) or the same YAML in the
// LOCKD_AUTH_YAML variable. A key may be given in plain text or as the hex
// SHA-256 of the key; either way only the hash is kept in memory, and every
// lookup compares against every key in constant time.
package auth

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Scope is what a key may do. Each scope implies the ones below it.
type Scope int

// Scopes, weakest first.
const (
	Read Scope = iota + 1
	Write
	Admin
)

func (s Scope) String() string {
	switch s {
	case Read:
		return "read"
	case Write:
		return "write"
	case Admin:
		return "admin"
	}
	return fmt.Sprintf("scope(%d)", int(s))
}

func parseScope(s string) (Scope, error) {
	switch s {
	case "read":
		return Read, nil
	case "write":
		return Write, nil
	case "admin":
		return Admin, nil
	}
	return 0, fmt.Errorf("unknown scope %q (read, write or admin)", s)
}

// Key is one configured API key, without its secret.
type Key struct {
	Name string
	// Scope is the strongest scope the key was given.
	Scope Scope
	// Prefixes limits the lock keys it may touch; empty means every key.
	Prefixes []string
	// MaxHolds, MaxWaiters and MaxEventStreams cap the key's open hold
	// streams, waiting acquires and event streams; 0 means the server's
	// default per key.
	MaxHolds, MaxWaiters, MaxEventStreams int
	// MaxGrants, MaxValueBytes and MaxSessions cap the live grants, the
	// bytes of their values and the sessions the key keeps in Redis;
	// MaxTTL the TTL it may ask for. 0 means the server's default.
	MaxGrants, MaxValueBytes, MaxSessions int
	MaxTTL                                time.Duration
	// MaxEventReads caps the events of the event stream that the key's
	// Last-Event-ID resumes read a minute; 0 means the server's default.
	MaxEventReads int
	hash          [sha256.Size]byte
}

// Can reports whether the key has scope s.
func (k Key) Can(s Scope) bool { return k.Scope >= s }

// MayTouch reports whether the key may see and act on lock key or
// semaphore name lk: it starts with one of the key's prefixes, or the key
// has none.
func (k Key) MayTouch(lk string) bool {
	if len(k.Prefixes) == 0 {
		return true
	}
	for _, p := range k.Prefixes {
		if strings.HasPrefix(lk, p) {
			return true
		}
	}
	return false
}

// ErrOutsidePrefixes is ListScope's answer to a listing that none of the
// key's prefixes lies in or under.
var ErrOutsidePrefixes = errors.New("auth: the listing is outside the key's prefixes")

// ListScope is what a listing of the names under prefix walks for this
// key, and whether its rows must be filtered with MayTouch:
//
//   - prefix itself, unfiltered, when the key may see all of it (it has
//     no prefixes, or prefix lies under one of them);
//   - the key's one prefix that lies under prefix, unfiltered: walking the
//     broader prefix and dropping other tenants' names would answer an
//     empty page for each of them, telling how many there are;
//   - prefix, filtered, when several of the key's prefixes lie under it;
//   - ErrOutsidePrefixes when none does.
func (k Key) ListScope(prefix string) (scan string, filter bool, err error) {
	if len(k.Prefixes) == 0 {
		return prefix, false, nil
	}
	var inside []string
	for _, p := range k.Prefixes {
		if strings.HasPrefix(prefix, p) {
			return prefix, false, nil
		}
		if strings.HasPrefix(p, prefix) {
			inside = append(inside, p)
		}
	}
	switch len(inside) {
	case 0:
		return "", false, ErrOutsidePrefixes
	case 1:
		return inside[0], false, nil
	default:
		return prefix, true, nil
	}
}

// Separators end a segment of a lock key or semaphore name. A prefix that
// ends in one covers whole segments only: "a:1:" covers "a:1:x", while
// "a:1", a plain string prefix, also covers "a:10" and "a:1x".
const Separators = ":/.-_@"

// KeyPrefix is one prefix of one API key, by the key's name.
type KeyPrefix struct {
	Key, Prefix string
}

// PrefixesWithoutSeparator are the keys' prefixes that do not end in one
// of Separators: each also covers names that merely start with it, an
// easy misconfiguration that lockd serve warns about.
func (r *Keyring) PrefixesWithoutSeparator() []KeyPrefix {
	if r == nil {
		return nil
	}
	var out []KeyPrefix
	for _, k := range r.keys {
		for _, p := range k.Prefixes {
			if !strings.ContainsAny(p[len(p)-1:], Separators) {
				out = append(out, KeyPrefix{Key: k.Name, Prefix: p})
			}
		}
	}
	return out
}

// Keyring is the set of configured keys. The zero Keyring (no keys) means
// auth is off.
type Keyring struct {
	keys []Key
}

// Enabled reports whether any key is configured.
func (r *Keyring) Enabled() bool { return r != nil && len(r.keys) > 0 }

// Len is the number of keys.
func (r *Keyring) Len() int { return len(r.keys) }

// Prefixes are the distinct prefixes of every key, sorted: the tenants'
// parts of the key space.
func (r *Keyring) Prefixes() []string {
	if r == nil {
		return nil
	}
	var ps []string
	for _, k := range r.keys {
		ps = append(ps, k.Prefixes...)
	}
	slices.Sort(ps)
	return slices.Compact(ps)
}

// Lookup finds the key whose secret is presented. It compares the SHA-256
// of presented with every configured hash, without stopping early, so the
// time taken says nothing about which key nearly matched. The key is the
// keyring's own (a keyring is never changed once parsed): not copied,
// since it is looked up on every request.
func (r *Keyring) Lookup(presented string) (*Key, bool) {
	if r == nil || presented == "" {
		return nil, false
	}
	h := sha256.Sum256([]byte(presented))
	found := -1
	for i := range r.keys {
		if subtle.ConstantTimeCompare(h[:], r.keys[i].hash[:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return nil, false
	}
	return &r.keys[found], true
}

// file is the YAML layout of --auth-file.
type file struct {
	Keys []struct {
		Name     string   `yaml:"name"`
		Key      string   `yaml:"key"`
		SHA256   string   `yaml:"sha256"`
		Scopes   []string `yaml:"scopes"`
		Prefixes []string `yaml:"prefixes"`
		// MaxHolds, MaxWaiters and MaxEventStreams override the
		// server's quotas per key.
		MaxHolds        int `yaml:"max_holds"`
		MaxWaiters      int `yaml:"max_waiters"`
		MaxEventStreams int `yaml:"max_event_streams"`
		// MaxEventReads is per minute.
		MaxEventReads int `yaml:"max_event_reads"`
		MaxGrants     int `yaml:"max_grants"`
		MaxValueBytes int `yaml:"max_value_bytes"`
		MaxSessions   int `yaml:"max_sessions"`
		// MaxTTL is a duration: 90s, 1h.
		MaxTTL string `yaml:"max_ttl"`
	} `yaml:"keys"`
}

// Parse reads the YAML auth configuration. Errors name the entry at fault
// and never include a key.
func Parse(data []byte) (*Keyring, error) {
	var f file
	dec := yaml.NewDecoder(strings.NewReader(string(data)))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("auth: %w", err)
	}
	r := &Keyring{}
	names := map[string]bool{}
	for i, e := range f.Keys {
		where := fmt.Sprintf("auth: keys[%d]", i)
		if e.Name == "" {
			return nil, fmt.Errorf("%s: name is required", where)
		}
		where += " (" + e.Name + ")"
		if names[e.Name] {
			return nil, fmt.Errorf("%s: the name is used twice", where)
		}
		names[e.Name] = true
		if min(e.MaxHolds, e.MaxWaiters, e.MaxEventStreams, e.MaxEventReads, e.MaxGrants, e.MaxValueBytes, e.MaxSessions) < 0 {
			return nil, fmt.Errorf("%s: max_holds, max_waiters, max_event_streams, max_event_reads, max_grants, max_value_bytes and max_sessions must not be negative (0: the server's default)", where)
		}
		k := Key{Name: e.Name, Prefixes: e.Prefixes, MaxHolds: e.MaxHolds, MaxWaiters: e.MaxWaiters, MaxEventStreams: e.MaxEventStreams,
			MaxEventReads: e.MaxEventReads, MaxGrants: e.MaxGrants, MaxValueBytes: e.MaxValueBytes, MaxSessions: e.MaxSessions}
		if e.MaxTTL != "" {
			d, err := time.ParseDuration(e.MaxTTL)
			if err != nil || d < 100*time.Millisecond {
				return nil, fmt.Errorf("%s: max_ttl must be a duration of at least 100ms, such as 90s or 1h, got %q", where, e.MaxTTL)
			}
			k.MaxTTL = d
		}
		switch {
		case e.Key != "" && e.SHA256 != "":
			return nil, fmt.Errorf("%s: give key or sha256, not both", where)
		case e.Key != "":
			if len(e.Key) < 16 {
				return nil, fmt.Errorf("%s: key must be at least 16 characters", where)
			}
			k.hash = sha256.Sum256([]byte(e.Key))
		case e.SHA256 != "":
			b, err := hex.DecodeString(e.SHA256)
			if err != nil || len(b) != sha256.Size {
				return nil, fmt.Errorf("%s: sha256 must be 64 hex digits", where)
			}
			copy(k.hash[:], b)
		default:
			return nil, fmt.Errorf("%s: key or sha256 is required", where)
		}
		if len(e.Scopes) == 0 {
			return nil, fmt.Errorf("%s: scopes is required (read, write or admin)", where)
		}
		for _, s := range e.Scopes {
			sc, err := parseScope(s)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", where, err)
			}
			k.Scope = max(k.Scope, sc)
		}
		for _, p := range e.Prefixes {
			if p == "" {
				return nil, fmt.Errorf("%s: an empty prefix; leave prefixes out to allow every key", where)
			}
		}
		for _, o := range r.keys {
			if o.hash == k.hash {
				return nil, fmt.Errorf("%s: the same key as %s", where, o.Name)
			}
		}
		r.keys = append(r.keys, k)
	}
	if len(r.keys) == 0 {
		return nil, errors.New("auth: no keys configured")
	}
	slices.SortFunc(r.keys, func(a, b Key) int { return strings.Compare(a.Name, b.Name) })
	return r, nil
}
