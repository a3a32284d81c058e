package lock

import (
	"testing"
	"time"
)

// Zero and negative settings take their defaults, others stay, and
// MaxHoldersPerKey never exceeds MaxLimit.
func TestOptionsWithDefaults(t *testing.T) {
	d := Options{}.withDefaults()
	if d.HistoryMax != defaultHistoryMax || d.Retention != defaultRetention || d.MaxWait != defaultMaxWait ||
		d.MaxWaiters != defaultMaxWaiters || d.MaxWaitersPerKey != defaultMaxPerKey || d.MaxHoldersPerKey != MaxLimit ||
		d.CallTimeout != defaultCall || d.MaxTTL != 24*time.Hour || d.EpochRefresh != time.Second ||
		d.ReplicaAckTimeout != 50*time.Millisecond || d.RenewalsMax != defaultRenewalsMax ||
		d.EventsMax != defaultEventsMax || d.EventsResumeMax != DefaultEventsResumeMax || d.SweepInterval != defaultSweepInterval {
		t.Fatalf("defaults: %+v", d)
	}
	if n := (Options{HistoryMax: -1, CallTimeout: -time.Second}).withDefaults(); n.HistoryMax != defaultHistoryMax || n.CallTimeout != defaultCall {
		t.Fatalf("negative settings: %+v", n)
	}
	set := Options{HistoryMax: 7, CallTimeout: 3 * time.Second, MaxHoldersPerKey: 5, ReplicaAcks: 2}.withDefaults()
	if set.HistoryMax != 7 || set.CallTimeout != 3*time.Second || set.MaxHoldersPerKey != 5 || set.ReplicaAcks != 2 {
		t.Fatalf("settings given: %+v", set)
	}
	if over := (Options{MaxHoldersPerKey: MaxLimit + 1}).withDefaults(); over.MaxHoldersPerKey != MaxLimit {
		t.Fatalf("MaxHoldersPerKey above MaxLimit: %d", over.MaxHoldersPerKey)
	}
}
