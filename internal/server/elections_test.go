package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lockd/lockd/api"
	"github.com/lockd/lockd/internal/lockdtest"
)

func (f *fixture) campaign(t *testing.T, name string, body api.CampaignRequest) api.Leadership {
	t.Helper()
	res, err := f.client.CampaignWithResponse(context.Background(), name, nil, body)
	if err != nil {
		t.Fatal(err)
	}
	if res.JSON200 == nil {
		t.Fatalf("campaign %s: %d %s", name, res.StatusCode(), res.Body)
	}
	return *res.JSON200
}

func (f *fixture) election(t *testing.T, name string) api.ElectionState {
	t.Helper()
	res, err := f.client.GetElectionWithResponse(context.Background(), name)
	if err != nil || res.JSON200 == nil {
		t.Fatalf("election %s: %v %s", name, err, res.Body)
	}
	return *res.JSON200
}

// A campaign leads a free election; the next candidate waits in line,
// shows as a candidate, and leads with a higher term when the leader
// resigns. Observers see every change in order: the leader at once, its
// proclaimed value, the vacancy and the next leader.
func TestElectionLifecycle(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	const name = "billing:leader"
	v := api.Value(`{"addr":"10.0.0.7:8080"}`)
	a := f.campaign(t, name, api.CampaignRequest{Candidate: ptr("host-a"), Value: &v, TtlMs: ptr[int64](10000)})
	if a.Leader != "host-a" || a.Term <= 0 || a.Token == "" || a.Value == nil || string(*a.Value) != string(v) {
		t.Fatalf("leadership: %+v", a)
	}
	_, obs := openEvents(t, f.url+"/v1/elections/"+name+"/observe", "", "")
	if ev := obs.next(t); ev.event != "leader" || ev.data["leader"] != "host-a" || int64(ev.data["term"].(float64)) != a.Term {
		t.Fatalf("first observed: %+v", ev)
	}

	// A second campaign fails at once, then waits in line.
	res, err := f.client.CampaignWithResponse(ctx, name, nil, api.CampaignRequest{Candidate: ptr("host-b")})
	if err != nil || res.StatusCode() != http.StatusConflict {
		t.Fatalf("second campaign without a wait: %v %d %s", err, res.StatusCode(), res.Body)
	}
	led := make(chan api.Leadership, 1)
	go func() {
		res, err := f.client.CampaignWithResponse(ctx, name, nil, api.CampaignRequest{Candidate: ptr("host-b"), WaitMs: ptr[int64](10000)})
		if err != nil || res.JSON200 == nil {
			t.Errorf("waiting campaign: %v %s", err, res.Body)
			led <- api.Leadership{}
			return
		}
		led <- *res.JSON200
	}()
	lockdtest.Eventually(t, func() bool { return len(f.election(t, name).Candidates) == 1 }, 5*time.Second, "a candidate in line")
	if st := f.election(t, name); *st.Leader != "host-a" || st.Candidates[0].Candidate != "host-b" || *st.Term != a.Term {
		t.Fatalf("election while host-b waits: %+v", st)
	}

	pv := api.Value(`"draining"`)
	proclaimed := time.Now()
	if res, err := f.client.ProclaimWithResponse(ctx, name, api.ProclaimRequest{Token: a.Token, Value: pv}); err != nil || res.JSON200 == nil || string(*res.JSON200.Value) != `"draining"` {
		t.Fatalf("proclaim: %v %s", err, res.Body)
	}
	if ev := obs.next(t); ev.event != "proclaimed" || ev.data["value"] != "draining" {
		t.Fatalf("observed after proclaim: %+v", ev)
	}
	t.Logf("an observer heard the proclaim %v after it was sent", time.Since(proclaimed))

	start := time.Now()
	if res, err := f.client.ResignWithResponse(ctx, name, api.ReleaseRequest{Token: a.Token}); err != nil || res.JSON200 == nil || !res.JSON200.Resigned {
		t.Fatalf("resign: %v %s", err, res.Body)
	}
	b := <-led
	t.Logf("host-b led %v after host-a resigned", time.Since(start))
	if b.Leader != "host-b" || b.Term <= a.Term {
		t.Fatalf("next leadership %+v after term %d", b, a.Term)
	}
	if ev := obs.next(t); ev.event != "vacant" || int64(ev.data["term"].(float64)) != a.Term {
		t.Fatalf("observed after resign: %+v", ev)
	}
	if ev := obs.next(t); ev.event != "leader" || ev.data["leader"] != "host-b" || int64(ev.data["term"].(float64)) != b.Term {
		t.Fatalf("observed next leader: %+v", ev)
	}

	// A stale leader's proclaim is refused; a lock of the same name is
	// another resource.
	if res, err := f.client.ProclaimWithResponse(ctx, name, api.ProclaimRequest{Token: a.Token, Value: pv}); err != nil || res.StatusCode() != http.StatusConflict {
		t.Fatalf("proclaim by the old leader: %v %d %s", err, res.StatusCode(), res.Body)
	}
	f.acquire(t, name, api.AcquireRequest{})
	list, err := f.client.ListElectionsWithResponse(ctx, &api.ListElectionsParams{Prefix: ptr("billing:")})
	if err != nil || list.JSON200 == nil || len(list.JSON200.Elections) != 1 || *list.JSON200.Elections[0].Leader != "host-b" {
		t.Fatalf("list: %v %s", err, list.Body)
	}
	hist, err := f.client.GetElectionHistoryWithResponse(ctx, name, nil)
	if err != nil || hist.JSON200 == nil || len(hist.JSON200.Events) < 4 {
		t.Fatalf("history: %v %s", err, hist.Body)
	}
}

// A leader that campaigns with /campaign/hold leads while its connection
// is open; when it closes, the next candidate leads at once, not after the
// TTL.
func TestCampaignHoldEndsWithTheConnection(t *testing.T) {
	f := newFixture(t)
	const name = "hold:leader"
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, f.url+"/v1/elections/"+name+"/campaign/hold",
		strings.NewReader(`{"candidate":"holder","ttl_ms":30000}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("campaign hold: %v %v", err, resp)
	}
	sc := bufio.NewScanner(resp.Body)
	var event, data string
	for sc.Scan() && data == "" {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "event: "); ok {
			event = v
		}
		if v, ok := strings.CutPrefix(line, "data: "); ok {
			data = v
		}
	}
	var l api.Leadership
	if event != "leader" || json.Unmarshal([]byte(data), &l) != nil || l.Leader != "holder" || l.Token == "" {
		t.Fatalf("first event %q %s", event, data)
	}
	next := make(chan api.Leadership, 1)
	go func() {
		res, err := f.client.CampaignWithResponse(context.Background(), name, nil, api.CampaignRequest{Candidate: ptr("next"), WaitMs: ptr[int64](10000)})
		if err != nil || res.JSON200 == nil {
			t.Errorf("next campaign: %v", err)
			next <- api.Leadership{}
			return
		}
		next <- *res.JSON200
	}()
	lockdtest.Eventually(t, func() bool { return len(f.election(t, name).Candidates) == 1 }, 5*time.Second, "a candidate in line")
	start := time.Now()
	cancel()
	resp.Body.Close()
	n := <-next
	took := time.Since(start)
	t.Logf("the next candidate led %v after the leader's connection closed", took)
	if n.Leader != "next" || n.Term <= l.Term || took > 5*time.Second {
		t.Fatalf("after the hold closed: %+v in %v", n, took)
	}
}

// An observe whose first read Redis cannot answer is a 503 the client can
// retry, never a stream that ends without an event.
func TestObserveAnswers503WhileRedisIsAway(t *testing.T) {
	f := newFixture(t)
	f.redis.Pause()
	resp, err := http.Get(f.url + "/v1/elections/away/observe")
	f.redis.Resume()
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("observe while Redis is paused: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
}
