package main

import (
	"strings"
	"testing"
)

func TestParseTopologyURL(t *testing.T) {
	tests := []struct {
		url, kind, err string
		addrs          int
		tls            bool
		master         string
	}{
		{url: "redis://127.0.0.1:6379/0", kind: "redis", addrs: 1},
		{url: "rediss://h:6380/1", kind: "redis", addrs: 1, tls: true},
		{url: "redis-sentinel://127.0.0.1:26379,127.0.0.1:26380/mymaster", kind: "sentinel", addrs: 2, master: "mymaster"},
		{url: "redis-sentinel://:s3cret@127.0.0.1:26379/mymaster/2", kind: "sentinel", addrs: 1, master: "mymaster"},
		{url: "rediss-sentinel://a:1,b:2/m", kind: "sentinel", addrs: 2, tls: true, master: "m"},
		{url: "redis-cluster://127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002", kind: "cluster", addrs: 3},
		{url: "redis-cluster://user:pw@127.0.0.1:7000", kind: "cluster", addrs: 1},
		{url: "redis-sentinel://127.0.0.1:26379", err: "master's name is missing"},
		{url: "redis-sentinel://127.0.0.1:26379/m/x", err: "database"},
		{url: "redis-cluster://127.0.0.1", err: "want host:port"},
		{url: "redis-cluster://127.0.0.1:0", err: "bad port"},
		{url: "redis-cluster://127.0.0.1:7000/3", err: "only database 0"},
		{url: "http://x", err: "invalid URL scheme"},
	}
	for _, tc := range tests {
		t.Run(tc.url, func(t *testing.T) {
			topo, err := openTopology(tc.url, credentials{})
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer topo.client.Close()
			if topo.kind != tc.kind || len(topo.addrs) != tc.addrs || topo.tls != tc.tls {
				t.Fatalf("got %s %v tls=%v", topo.kind, topo.addrs, topo.tls)
			}
			if tc.master != "" && (topo.sentinel == nil || topo.sentinel.MasterName != tc.master) {
				t.Fatalf("sentinel = %+v", topo.sentinel)
			}
		})
	}
}
