package client_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"testing"

	"github.com/lockd/lockd/client"
)

// The values of the scenario value-round-trip (clients/scenarios.json),
// which the Python and TypeScript clients pass too, come back from the Go
// client as they were sent, and decode; a lone surrogate is refused,
// naming value.
func TestValueRoundTrip(t *testing.T) {
	raw, err := os.ReadFile("../clients/scenarios.json")
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Scenarios []struct {
			ID     string            `json:"id"`
			Values []json.RawMessage `json:"values"`
		} `json:"scenarios"`
	}
	if err := json.Unmarshal(raw, &file); err != nil {
		t.Fatal(err)
	}
	var values []json.RawMessage
	for _, s := range file.Scenarios {
		if s.ID == "value-round-trip" {
			values = s.Values
		}
	}
	if len(values) == 0 {
		t.Fatal("scenarios.json: value-round-trip has no values")
	}
	ld := startLockd(t)
	c, err := client.New(ld.URL)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	key := uniqueKey(t)
	for _, v := range values {
		l, err := c.Acquire(ctx, key, client.AcquireOptions{Value: v})
		if err != nil {
			t.Fatalf("acquire with %s: %v", v, err)
		}
		st, err := c.State(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		var want bytes.Buffer
		_ = json.Compact(&want, v)
		var decoded any
		if st.Value == nil || string(*st.Value) != want.String() || json.Unmarshal(*st.Value, &decoded) != nil {
			t.Errorf("sent %s, the state's value: %s", v, valueText(st.Value))
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	_, err = c.Acquire(ctx, key, client.AcquireOptions{Value: json.RawMessage(`"\ud800"`)})
	var apiErr *client.APIError
	if !errors.Is(err, client.ErrInvalid) || !errors.As(err, &apiErr) || apiErr.Problem.Field == nil || *apiErr.Problem.Field != "value" {
		t.Fatalf("acquire with a lone surrogate: %v", err)
	}
}

func valueText(v *json.RawMessage) string {
	if v == nil {
		return "<none>"
	}
	return string(*v)
}
