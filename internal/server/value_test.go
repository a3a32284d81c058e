package server_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/lockd/lockd/api"
	"github.com/lockd/lockd/internal/lock"
)

// A value goes in with an acquire and comes out in the state, compact;
// a renew replaces it; null, too large or too deep is a 400 that names
// the field, and nothing is granted.
func TestValuesOverHTTP(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	v := api.Value(`{ "addr": "10.0.0.7:8080", "build": [1, 2] }`)
	l := f.acquire(t, "val:a", api.AcquireRequest{Value: &v})
	st := f.lockState(t, "val:a")
	if st.Value == nil || string(*st.Value) != `{"addr":"10.0.0.7:8080","build":[1,2]}` || st.Holders[0].Value == nil {
		t.Fatalf("state value: %+v", st)
	}
	nv := api.Value(`"draining"`)
	res, err := f.client.RenewLockWithResponse(ctx, "val:a", api.RenewRequest{Token: l.Token, Value: &nv})
	if err != nil || res.JSON200 == nil {
		t.Fatalf("renew with a value: %v %s", err, res.Body)
	}
	if st := f.lockState(t, "val:a"); st.Value == nil || string(*st.Value) != `"draining"` {
		t.Fatalf("after renew: %+v", st.Value)
	}
	sv := api.Value(`{"slot":3}`)
	f.acquireSem(t, "val:pool", api.SemaphoreAcquireRequest{Limit: 2, Value: &sv})
	if st := f.semState(t, "val:pool"); st.Value == nil || string(*st.Value) != `{"slot":3}` {
		t.Fatalf("permit value: %+v", st.Value)
	}

	big, _ := json.Marshal(strings.Repeat("x", 4095))
	deep := strings.Repeat("[", 33) + strings.Repeat("]", 33)
	for name, raw := range map[string]string{"null": "null", "too large": string(big), "too deep": deep} {
		v := api.Value(raw)
		res, err := f.client.AcquireLockWithResponse(ctx, "val:bad", nil, api.AcquireRequest{Value: &v})
		if err != nil {
			t.Fatal(err)
		}
		p := problemOf(t, res.HTTPResponse, res.Body)
		if res.StatusCode() != http.StatusBadRequest || p.Field == nil || *p.Field != "value" {
			t.Errorf("%s: %d %s", name, res.StatusCode(), res.Body)
		}
	}
	if _, err := f.engine.State(ctx, lock.Lock("val:bad")); err == nil {
		t.Error("a refused value was granted")
	}
	ok := api.Value(strings.Repeat("[", 32) + strings.Repeat("]", 32))
	f.acquire(t, "val:deep-enough", api.AcquireRequest{Value: &ok})
}
