package main

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/lockd/lockd/internal/lock"
	"github.com/lockd/lockd/internal/lock/store"
)

// topology is a parsed --redis URL: the client for its scheme and what the
// engine needs to know about it.
type topology struct {
	kind     string // "redis", "sentinel" or "cluster"
	client   redis.UniversalClient
	sentinel *lock.Sentinel
	masters  []*redis.Client // --redlock's independent masters
	addrs    []string
	tls      bool
}

// credentials are what lockd presents: the Redis servers' user and
// password (used when the URL has none), and under Sentinel the
// sentinels' own, which Sentinel configures apart (its requirepass or ACL
// users) and go-redis presents only to the sentinels.
type credentials struct {
	user, password                 string
	sentinelUser, sentinelPassword string
}

// openRedlock opens a client for each of --redlock's URLs: one server each,
// redis:// or rediss://, an odd number of at least three.
func openRedlock(list string, creds credentials) (topology, error) {
	t := topology{kind: "redlock"}
	closeAll := func() {
		for _, m := range t.masters {
			_ = m.Close()
		}
	}
	urls := strings.Split(list, ",")
	if len(urls) < 3 || len(urls)%2 == 0 {
		return t, fmt.Errorf("need an odd number of masters, at least 3, not %d", len(urls))
	}
	for _, raw := range urls {
		raw = strings.TrimSpace(raw)
		if !strings.HasPrefix(raw, "redis://") && !strings.HasPrefix(raw, "rediss://") {
			closeAll()
			return topology{}, fmt.Errorf("each master is a redis:// or rediss:// URL of one server")
		}
		one, err := openTopology(raw, creds)
		if err != nil {
			closeAll()
			return topology{}, fmt.Errorf("%s", redactURL(err, raw))
		}
		t.masters = append(t.masters, one.client.(*redis.Client))
		t.addrs = append(t.addrs, one.addrs...)
		t.tls = t.tls || one.tls
	}
	return t, nil
}

// multiURL is a redis-sentinel:// or redis-cluster:// URL:
// scheme://[[user]:password@]host:port[,host:port…][/path].
type multiURL struct {
	user, password string
	addrs          []string
	path           []string
	tls            bool
}

func parseMultiURL(raw, scheme string) (multiURL, error) {
	var u multiURL
	rest, ok := strings.CutPrefix(raw, scheme+"://")
	if !ok {
		rest, ok = strings.CutPrefix(raw, strings.Replace(scheme, "redis-", "rediss-", 1)+"://")
		if !ok {
			return u, fmt.Errorf("not a %s:// URL", scheme)
		}
		u.tls = true
	}
	hosts, path, _ := strings.Cut(rest, "/")
	if i := strings.LastIndex(hosts, "@"); i >= 0 {
		info := hosts[:i]
		hosts = hosts[i+1:]
		user, pass, hasPass := strings.Cut(info, ":")
		var err error
		if u.user, err = url.PathUnescape(user); err != nil {
			return u, fmt.Errorf("user: %w", err)
		}
		if hasPass {
			if u.password, err = url.PathUnescape(pass); err != nil {
				return u, fmt.Errorf("password: %w", err)
			}
		}
	}
	for _, h := range strings.Split(hosts, ",") {
		host, port, err := net.SplitHostPort(h)
		if err != nil || host == "" {
			return u, fmt.Errorf("address %q: want host:port", h)
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return u, fmt.Errorf("address %q: bad port", h)
		}
		u.addrs = append(u.addrs, h)
	}
	if path != "" {
		u.path = strings.Split(path, "/")
	}
	return u, nil
}

// openTopology builds the client for a --redis URL. Sentinel and Cluster
// URLs name several addresses; the credentials in the URL (or from the
// environment) are those of the Redis servers, and the sentinels' come
// from the environment only.
func openTopology(raw string, creds credentials) (topology, error) {
	withCreds := func(u *multiURL) {
		if u.user == "" {
			u.user = creds.user
		}
		if u.password == "" {
			u.password = creds.password
		}
	}
	tlsConfig := func(on bool) *tls.Config {
		if !on {
			return nil
		}
		return &tls.Config{MinVersion: tls.VersionTLS12}
	}
	switch {
	case strings.HasPrefix(raw, "redis-sentinel://"), strings.HasPrefix(raw, "rediss-sentinel://"):
		u, err := parseMultiURL(raw, "redis-sentinel")
		if err != nil {
			return topology{}, err
		}
		withCreds(&u)
		if len(u.path) == 0 || u.path[0] == "" {
			return topology{}, fmt.Errorf("the master's name is missing: redis-sentinel://host:26379/MASTER")
		}
		db := 0
		if len(u.path) > 1 && u.path[1] != "" {
			if db, err = strconv.Atoi(u.path[1]); err != nil || db < 0 {
				return topology{}, fmt.Errorf("database %q: want a number", u.path[1])
			}
		}
		opts := &redis.UniversalOptions{
			MasterName: u.path[0], Addrs: u.addrs,
			SentinelUsername: creds.sentinelUser, SentinelPassword: creds.sentinelPassword,
			Username: u.user, Password: u.password, DB: db, TLSConfig: tlsConfig(u.tls),
		}
		store.Tune(opts)
		return topology{
			kind: "sentinel", client: redis.NewFailoverClient(opts.Failover()), addrs: u.addrs, tls: u.tls,
			// The engine asks the sentinels for the master itself too
			// (wake-ups, /readyz), with the same credentials.
			sentinel: &lock.Sentinel{Addrs: u.addrs, MasterName: u.path[0],
				Username: creds.sentinelUser, Password: creds.sentinelPassword},
		}, nil
	case strings.HasPrefix(raw, "redis-cluster://"), strings.HasPrefix(raw, "rediss-cluster://"):
		u, err := parseMultiURL(raw, "redis-cluster")
		if err != nil {
			return topology{}, err
		}
		withCreds(&u)
		if len(u.path) > 0 && u.path[0] != "" && u.path[0] != "0" {
			return topology{}, fmt.Errorf("a cluster has only database 0")
		}
		opts := &redis.UniversalOptions{Addrs: u.addrs, Username: u.user, Password: u.password, TLSConfig: tlsConfig(u.tls)}
		store.Tune(opts)
		return topology{kind: "cluster", client: redis.NewClusterClient(opts.Cluster()), addrs: u.addrs, tls: u.tls}, nil
	default:
		opts, err := redis.ParseURL(raw)
		if err != nil {
			return topology{}, err
		}
		// Credentials may come from the environment instead of the URL, to
		// keep them out of process listings.
		if opts.Username == "" {
			opts.Username = creds.user
		}
		if opts.Password == "" {
			opts.Password = creds.password
		}
		store.TuneClient(opts)
		return topology{kind: "redis", client: redis.NewClient(opts), addrs: []string{opts.Addr}, tls: opts.TLSConfig != nil}, nil
	}
}
