package store_test

import (
	"reflect"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/lockd/lockd/internal/lock/store"
)

// TuneClient sets exactly what Tune sets: a setting added to one and not
// the other shows here.
func TestTuneClientIsTune(t *testing.T) {
	u := redis.UniversalOptions{Addrs: []string{"h:1"}}
	store.Tune(&u)
	want := u.Simple()
	got := &redis.Options{Addr: "h:1"}
	store.TuneClient(got)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("TuneClient set\n%+v\nTune set\n%+v", got, want)
	}
	if got.MaxRetries != -1 || got.Protocol != 2 || !got.DisableIdentity || !got.ContextTimeoutEnabled || got.DialTimeout == 0 {
		t.Fatalf("not tuned: %+v", got)
	}
}
