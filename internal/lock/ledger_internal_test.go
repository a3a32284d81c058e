package lock

import (
	"fmt"
	"runtime"
	"testing"
	"time"
)

// The ledger keeps what a lease needs to be put back, follows its
// renewals and re-entries, and forgets it at its release, its
// force-release, a validation that Redis no longer holds it, or its
// expiry.
func TestLedger(t *testing.T) {
	now := time.Now()
	lease := func(token string, fence int64, count int) Lease {
		return Lease{Token: token, Owner: "o", Fence: fence, Count: count, TTL: 10 * time.Second, AcquiredAt: now, Mode: Exclusive}
	}
	var lg ledger
	lg.note("k", lease("t1", 7, 1), 10*time.Second, AcquireRequest{Value: `"v"`, LockDelay: time.Second}, now)
	lg.note("k", lease("t1", 7, 2), 10*time.Second, AcquireRequest{Token: "t1"}, now) // a re-entry keeps the value
	lg.renewed("k", lease("t1", 7, 2), 20*time.Second, "", now)
	live, last := lg.live(nil)
	if len(live) != 1 || live[0].value != `"v"` || live[0].count != 2 || live[0].delay != time.Second || last < 19*time.Second {
		t.Fatalf("after a grant, a re-entry and a renewal: %+v, last %v", live, last)
	}
	lg.released("k", "t1", 1)
	if live, _ := lg.live(nil); len(live) != 1 || live[0].count != 1 {
		t.Fatalf("after one level released: %+v", live)
	}

	for _, c := range []struct {
		name string
		end  func()
	}{
		{"released", func() { lg.released("k", "t1", 0) }},
		{"force-released", func() { lg.broken("k", 7) }},
		{"no longer in Redis", func() { lg.drop("k", "t1", lg.leases["k"]["t1"].expires) }},
		{"expired", func() { lg.leases["k"]["t1"].expires = time.Now().Add(-time.Millisecond) }},
	} {
		lg.note("k", lease("t1", 7, 1), time.Minute, AcquireRequest{}, time.Now())
		c.end()
		if live, _ := lg.live(nil); len(live) != 0 {
			t.Errorf("%s: the ledger still has %+v", c.name, live)
		}
	}
	// A renewal after the validation read keeps the lease.
	lg.note("k", lease("t2", 8, 1), time.Minute, AcquireRequest{}, now)
	read := lg.leases["k"]["t2"].expires
	lg.renewed("k", lease("t2", 8, 1), 2*time.Minute, "", now)
	lg.drop("k", "t2", read)
	if !lg.has("k", "t2") {
		t.Fatal("a lease renewed after the validation read was dropped")
	}
}

// BenchmarkLedgerMemory reports the ledger's memory per live lease (with
// a 16-byte value), the figure docs/topologies.md gives.
func BenchmarkLedgerMemory(b *testing.B) {
	const n = 10_000
	var before, after runtime.MemStats
	for range b.N {
		runtime.GC()
		runtime.ReadMemStats(&before)
		lg := &ledger{}
		now := time.Now()
		for i := range n {
			token, err := newToken()
			if err != nil {
				b.Fatal(err)
			}
			l := Lease{Token: token, Owner: "worker-17", Fence: int64(i), Count: 1, TTL: 30 * time.Second, AcquiredAt: now}
			lg.note(fmt.Sprint("jobs:", i), l, 30*time.Second, AcquireRequest{Value: `{"job":1234567}`}, now)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		runtime.KeepAlive(lg)
	}
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "bytes/lease")
}
