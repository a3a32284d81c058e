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

// A value holds only what common JSON decoders read back as sent (N28): a
// number beyond a float64 (JavaScript and Python read Infinity) or a \u
// escape of half a surrogate pair (no character) is a 400 naming value, on
// every endpoint that takes one, and nothing is granted or changed.
func TestValueMustBePortable(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	lockToken := f.acquire(t, "port:l", api.AcquireRequest{}).Token
	semToken := f.acquireSem(t, "port:s", api.SemaphoreAcquireRequest{Limit: 2}).Token
	leaderToken := f.campaign(t, "port:e", api.CampaignRequest{}).Token
	endpoints := []struct {
		name, path, body string // body: a JSON object without its closing brace
	}{
		{"lock acquire", "/v1/locks/port:new/acquire", `{"ttl_ms":5000`},
		{"shared acquire", "/v1/locks/port:shared/acquire", `{"ttl_ms":5000,"mode":"shared"`},
		{"lock hold", "/v1/locks/port:new/hold", `{"ttl_ms":5000`},
		{"lock renew", "/v1/locks/port:l/renew", `{"token":"` + lockToken + `"`},
		{"permit", "/v1/semaphores/port:new/acquire", `{"ttl_ms":5000,"limit":2`},
		{"permit hold", "/v1/semaphores/port:new/hold", `{"ttl_ms":5000,"limit":2`},
		{"permit renew", "/v1/semaphores/port:s/renew", `{"token":"` + semToken + `"`},
		{"campaign", "/v1/elections/port:new/campaign", `{"ttl_ms":5000`},
		{"campaign hold", "/v1/elections/port:new/campaign/hold", `{"ttl_ms":5000`},
		{"proclaim", "/v1/elections/port:e/proclaim", `{"token":"` + leaderToken + `"`},
		{"leadership renew", "/v1/elections/port:e/renew", `{"token":"` + leaderToken + `"`},
	}
	bad := map[string]string{
		"1e999999":                `1e999999`,
		"-1e309":                  `-1e309`,
		"a 4000-digit number":     "-" + strings.Repeat("9", 4000),
		"an overflow in an array": `{"a":[1,2,1.8e308]}`,
		"a lone high surrogate":   `"\ud800"`,
		"a lone low surrogate":    `"x\uDC00y"`,
		"two high surrogates":     `"\ud800\ud800"`,
		"a high one at the end":   `["ok","\ud83d"]`,
		"in an object's name":     `{"\udfff":1}`,
	}
	for _, e := range endpoints {
		for name, raw := range bad {
			status, body, _ := call(t, "POST", f.url+e.path, "", e.body+`,"value":`+raw+`}`)
			if status != http.StatusBadRequest || !strings.Contains(body, `"field":"value"`) {
				t.Errorf("%s with %s: %d %s", e.name, name, status, body)
			}
		}
	}
	for _, res := range []lock.Resource{lock.Lock("port:new"), lock.Lock("port:shared"), lock.Semaphore("port:new"), lock.Election("port:new")} {
		if _, err := f.engine.State(ctx, res); err == nil {
			t.Errorf("%s was granted with a refused value", res)
		}
	}
	for _, res := range []lock.Resource{lock.Lock("port:l"), lock.Semaphore("port:s"), lock.Election("port:e")} {
		if st, err := f.engine.State(ctx, res); err != nil || st.Value != "" {
			t.Errorf("%s after refused values: %+v, %v", res, st, err)
		}
	}

	// What every decoder reads back is accepted, and comes back as sent.
	for name, raw := range map[string]string{
		"the largest float64":   `1.7976931348623157e308`,
		"below the smallest":    `1e-400`,
		"a 30-digit integer":    `123456789012345678901234567890`,
		"a surrogate pair":      `"\ud83d\ude00"`,
		"an escaped backslash":  `"\\ud800"`,
		"a BMP escape":          `"\u00e9\uffff"`,
		"numbers in structures": `{"n":[-0.5e-3,0,1E+2]}`,
	} {
		status, body, _ := call(t, "POST", f.url+"/v1/locks/port:ok/acquire", "", `{"ttl_ms":5000,"value":`+raw+`}`)
		var l api.Lease
		if err := json.Unmarshal([]byte(body), &l); status != 200 || err != nil {
			t.Errorf("%s: %d %s", name, status, body)
			continue
		}
		if st := f.lockState(t, "port:ok"); st.Value == nil || string(*st.Value) != raw {
			t.Errorf("%s: the state's value %s", name, ptrString(st.Value))
		}
		if status, body, _ := call(t, "POST", f.url+"/v1/locks/port:ok/release", "", `{"token":"`+l.Token+`"}`); status != 200 {
			t.Fatalf("release: %d %s", status, body)
		}
	}
}

func ptrString(v *api.Value) string {
	if v == nil {
		return "<nil>"
	}
	return string(*v)
}
