package server_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/lockd/lockd/api"
)

// POST /v1/elections/{name}/handover: the named candidate leads next,
// ahead of an earlier one; a name that is not campaigning is 409
// not_candidate (field to) and the leader still leads; bad input is 400.
func TestHandover(t *testing.T) {
	f := newFixture(t)
	a := f.campaign(t, "ho:svc", api.CampaignRequest{Candidate: ptr("a")})
	type led struct {
		code int
		l    *api.Leadership
	}
	campaign := func(name string) <-chan led {
		out := make(chan led, 1)
		go func() {
			res, err := f.client.CampaignWithResponse(context.Background(), "ho:svc", nil,
				api.CampaignRequest{Candidate: ptr(name), WaitMs: ptr(int64(20000)), TtlMs: ptr(int64(10000))})
			if err != nil {
				out <- led{}
				return
			}
			out <- led{res.StatusCode(), res.JSON200}
		}()
		return out
	}
	waitCandidates := func(n int) {
		for deadline := time.Now().Add(10 * time.Second); len(f.election(t, "ho:svc").Candidates) != n; {
			if time.Now().After(deadline) {
				t.Fatalf("%d candidates not in line", n)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	bc := campaign("b")
	waitCandidates(1)
	cc := campaign("c")
	waitCandidates(2)

	for _, tc := range []struct {
		name, body string
		status     int
		code       string
	}{
		{"not campaigning", `{"token":"` + a.Token + `","to":"nobody"}`, 409, "not_candidate"},
		{"no to", `{"token":"` + a.Token + `"}`, 400, "invalid_request"},
		{"empty to", `{"token":"` + a.Token + `","to":""}`, 400, "invalid_request"},
		{"wrong token", `{"token":"not-the-token","to":"c"}`, 409, "lease_lost"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, body, _ := call(t, "POST", f.url+"/v1/elections/ho:svc/handover", "", tc.body)
			var p api.Problem
			_ = json.Unmarshal([]byte(body), &p)
			if status != tc.status || string(p.Code) != tc.code {
				t.Fatalf("%d %s, want %d %s", status, body, tc.status, tc.code)
			}
		})
	}
	if st := f.election(t, "ho:svc"); st.Leader == nil || *st.Leader != "a" {
		t.Fatalf("after refused handovers: %+v", st)
	}
	status, body, _ := call(t, "POST", f.url+"/v1/elections/ho:svc/handover", "", `{"token":"`+a.Token+`","to":"c"}`)
	if status != 200 {
		t.Fatalf("handover: %d %s", status, body)
	}
	select {
	case c := <-cc:
		if c.code != 200 || c.l.Leader != "c" || c.l.Term <= a.Term {
			t.Fatalf("c: %d %+v", c.code, c.l)
		}
		status, body, _ := call(t, "POST", f.url+"/v1/elections/ho:svc/resign", "", `{"token":"`+c.l.Token+`"}`)
		if status != 200 {
			t.Fatalf("resign: %d %s", status, body)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("c did not lead after the handover")
	}
	if b := <-bc; b.code != 200 || b.l.Leader != "b" {
		t.Fatalf("b: %+v", b)
	}
}
