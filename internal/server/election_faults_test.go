package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockd/lockd/api"
	"github.com/lockd/lockd/internal/lock"
	"github.com/lockd/lockd/internal/lock/store"
	"github.com/lockd/lockd/internal/lockdtest"
	"github.com/lockd/lockd/internal/redistest"
)

// leadership is one term as its holder saw it: from the answer that made
// it leader (start) to the earlier of its resign (or cutting its hold) and
// the expiry that its last successful grant, renew or proclaim gave it
// (end). The lease in Redis covers at least this much, so "never two
// leaders at once" means that no two of these overlap.
type leadership struct {
	candidate  string
	term       int64
	start, end time.Time
	how        string // how it ended, for the log
}

// observation is one event an observer read: its type and term.
type observation struct {
	event string
	term  int64
}

// electionFaults is one run of TestElectionsUnderFaults: its candidates
// record their leaderships, its observers their streams.
type electionFaults struct {
	t        *testing.T
	replicas []string // each replica's /v1/elections/{name}
	httpc    *http.Client

	mu          sync.Mutex
	leaderships []leadership
	counts      map[string]int // what happened, by kind, for the log
}

const (
	faultTTL  = 500 * time.Millisecond
	faultWait = 3 * time.Second
)

func (e *electionFaults) count(what string) {
	e.mu.Lock()
	e.counts[what]++
	e.mu.Unlock()
}

func (e *electionFaults) record(l leadership) {
	e.mu.Lock()
	e.leaderships = append(e.leaderships, l)
	e.counts["leaderships that "+l.how]++
	e.mu.Unlock()
}

// post sends a JSON body. The client has no timeout of its own, for the
// streams; this bounds a plain request.
func (e *electionFaults) post(url string, body any) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	res, err := e.httpc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer res.Body.Close()
	out, err := io.ReadAll(res.Body)
	return res.StatusCode, out, err
}

// candidate campaigns again and again, through either replica, until stop.
func (e *electionFaults) candidate(id int, stop <-chan struct{}) {
	r := rand.New(rand.NewPCG(uint64(id), 22))
	name := fmt.Sprint("c", id)
	for {
		select {
		case <-stop:
			return
		default:
		}
		base := e.replicas[r.IntN(len(e.replicas))]
		if r.IntN(3) == 0 {
			e.leadByHold(r, name, base)
		} else {
			e.leadByCampaign(r, name, base)
		}
		time.Sleep(time.Duration(r.IntN(30)) * time.Millisecond)
	}
}

// leadByCampaign campaigns, and when it leads renews or proclaims (through
// either replica) up to twice, every ttl/3, then either resigns or pauses:
// it stops renewing, sleeps past its expiry, and sends one late renew, as
// a leader stalled by a GC pause would. A correct server refuses that
// renew; one that took it would make this a leader again while another
// leads, which the overlap check catches.
func (e *electionFaults) leadByCampaign(r *rand.Rand, name, base string) {
	status, body, err := e.post(base+"/campaign", map[string]any{
		"candidate": name, "ttl_ms": faultTTL.Milliseconds(), "wait_ms": faultWait.Milliseconds()})
	answered := time.Now()
	if err != nil || status != http.StatusOK {
		e.count(fmt.Sprintf("campaigns answered %d", status))
		return
	}
	var l api.Leadership
	if err := json.Unmarshal(body, &l); err != nil {
		e.t.Errorf("campaign's answer: %v: %s", err, body)
		return
	}
	ld := leadership{candidate: name, term: l.Term, start: answered, end: l.ExpiresAt}
	pause := r.IntN(3) == 0
	for i := range r.IntN(3) {
		time.Sleep(faultTTL / 3)
		if !time.Now().Before(ld.end) {
			ld.how = "lapsed" // its renewals failed or came too slowly
			break
		}
		op, req := "/renew", map[string]any{"token": l.Token}
		if r.IntN(2) == 0 {
			op, req["value"] = "/proclaim", map[string]any{"leader": name, "step": i}
		}
		status, body, err := e.post(e.replicas[r.IntN(len(e.replicas))]+op, req)
		switch {
		case err == nil && status == http.StatusOK:
			var n api.Leadership
			if err := json.Unmarshal(body, &n); err != nil {
				e.t.Errorf("%s's answer: %v: %s", op, err, body)
				return
			}
			ld.end = n.ExpiresAt
		case err == nil && (status == http.StatusConflict || status == http.StatusNotFound):
			// The lease is gone. It may have lapsed while the request was
			// on its way; before the expiry its holder knew, it must not.
			if time.Now().Before(ld.end) {
				e.t.Errorf("%s of term %d answered %d before the term's expiry %v: %s",
					op, ld.term, status, ld.end.Format(time.StampMicro), body)
			}
			ld.how = "lost"
		default:
			e.count(op + "s that failed (503 or transport)") // the next may succeed
		}
		if ld.how != "" {
			break
		}
	}
	switch {
	case ld.how != "":
	case pause:
		ld.how = "paused past their expiry"
		// Past the expiry by a few ms at least: Redis drops the key
		// within a ms or two of it, by its own clock.
		time.Sleep(time.Until(ld.end) + time.Duration(5+r.IntN(45))*time.Millisecond)
		status, body, err := e.post(e.replicas[r.IntN(len(e.replicas))]+"/renew", map[string]any{"token": l.Token})
		if err == nil && status == http.StatusOK {
			// Taken: its holder leads on until the new expiry. Judged by
			// the overlap check, as any other leadership.
			var n api.Leadership
			_ = json.Unmarshal(body, &n)
			ld.end, ld.how = n.ExpiresAt, "were renewed after their lapse"
		} else {
			e.count(fmt.Sprintf("late renews answered %d", status))
		}
	default:
		sent := time.Now()
		if sent.Before(ld.end) {
			ld.end, ld.how = sent, "resigned"
		} else {
			ld.how = "lapsed"
		}
		if status, _, err := e.post(e.replicas[r.IntN(len(e.replicas))]+"/resign", map[string]any{"token": l.Token}); err != nil || status != http.StatusOK {
			e.count(fmt.Sprintf("resigns answered %d", status)) // the lease lapses instead
		}
	}
	e.record(ld)
}

// leadByHold leads by /campaign/hold for a while, following its renewed
// events, then cuts the connection.
func (e *electionFaults) leadByHold(r *rand.Rand, name, base string) {
	ctx, cut := context.WithCancel(context.Background())
	defer cut()
	body, _ := json.Marshal(map[string]any{"candidate": name, "ttl_ms": faultTTL.Milliseconds(), "wait_ms": faultWait.Milliseconds()})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/campaign/hold", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	res, err := e.httpc.Do(req)
	if err != nil {
		e.count("holds that failed (transport)")
		return
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		e.count(fmt.Sprintf("holds answered %d", res.StatusCode))
		return
	}
	events := make(chan sse)
	go readEvents(res.Body, events)
	defer func() {
		cut()
		for range events { // until readEvents ends with the connection
		}
	}()
	first := <-events
	answered := time.Now()
	var l api.Leadership
	if first.event != "leader" || json.Unmarshal([]byte(first.data), &l) != nil {
		e.t.Errorf("a hold's first event: %q %s", first.event, first.data)
		return
	}
	ld := leadership{candidate: name, term: l.Term, start: answered, end: l.ExpiresAt}
	until := time.After(time.Duration(100+r.IntN(500)) * time.Millisecond)
	for ld.how == "" {
		select {
		case <-until:
			// Cutting the connection is this leader's resign: it leads
			// no longer, whatever the server does next.
			if now := time.Now(); now.Before(ld.end) {
				ld.end, ld.how = now, "were cut"
			} else {
				ld.how = "lapsed"
			}
		case ev, ok := <-events:
			switch {
			case !ok:
				// The stream ended: the server ended it, or the network
				// cut it (a proxy in front of lockd), and a hold's
				// leadership ends with its connection, so its holder
				// leads no longer from now, whatever the expiry it knew.
				if now := time.Now(); now.Before(ld.end) {
					ld.end = now
				}
				ld.how = "lost their stream"
			case ev.event == "renewed":
				var n api.Leadership
				if err := json.Unmarshal([]byte(ev.data), &n); err != nil {
					e.t.Errorf("renewed event: %v: %s", err, ev.data)
				}
				ld.end = n.ExpiresAt
			case ev.event == "lost":
				// As a refused renew: never before the expiry it knew
				// (the server's own is that or later).
				if time.Now().Before(ld.end) {
					e.t.Errorf("hold of term %d lost before its expiry %v: %s", ld.term, ld.end.Format(time.StampMicro), ev.data)
				}
				ld.how = "lost"
			}
		}
	}
	e.record(ld)
}

// observe follows the election through one replica until stop, and
// reconnects now and then: a new stream begins with a read of the current
// state, and what it is then sent of the moments around that read is
// where an observer could be handed an old term. It returns the events of
// each stream.
func (e *electionFaults) observe(id int, stop <-chan struct{}) [][]observation {
	r := rand.New(rand.NewPCG(uint64(id), 23))
	base := e.replicas[id%len(e.replicas)]
	var streams [][]observation
	for {
		select {
		case <-stop:
			return streams
		default:
		}
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/observe", nil)
		res, err := e.httpc.Do(req)
		if err != nil || res.StatusCode != http.StatusOK {
			if err == nil {
				res.Body.Close()
			}
			cancel()
			e.count("observe requests refused or failed")
			time.Sleep(50 * time.Millisecond)
			continue
		}
		events := make(chan sse)
		go readEvents(res.Body, events)
		var got []observation
		reconnect := time.After(time.Duration(100+r.IntN(500)) * time.Millisecond)
	read:
		for {
			select {
			case ev, ok := <-events:
				if !ok {
					e.count(fmt.Sprintf("observe streams that the server ended after %d events", min(len(got), 1)))
					break read
				}
				if ev.event == "" {
					continue // a heartbeat
				}
				var c api.ElectionChange
				if err := json.Unmarshal([]byte(ev.data), &c); err != nil {
					e.t.Errorf("observed %s: %v: %s", ev.event, err, ev.data)
				}
				got = append(got, observation{event: ev.event, term: c.Term})
			case <-reconnect:
				break read
			case <-stop:
				break read
			}
		}
		cancel()
		for range events {
		}
		res.Body.Close()
		streams = append(streams, got)
	}
}

// TestElectionsUnderFaults runs six candidates on one election through
// two lockd replicas, on one Redis, on Sentinel and on Cluster. On one
// Redis a proxy between lockd and Redis adds latency and resets
// connections (as TestWaitersUnderFaults); on Sentinel and Cluster a proxy
// in front of each lockd does (cutting holds and observers, delaying
// answers), and the election's master fails over in the middle of the
// run, with replica acks on so that no acknowledged grant is lost. Each leadership
// renews or proclaims for a while, then resigns, or pauses past its TTL
// and sends a late renew, or, led by /campaign/hold, has its connection
// cut. Four observers, two on each replica, reconnect now and then.
//
// Checked on what was recorded, not on timing: no two leaderships overlap
// (as their holders saw them, allowing for nothing); terms strictly
// increase in grant order; every observer sees terms in order: each
// leader event's term above the one before on its stream, a proclaimed
// event only of the leader it last announced, never an older term than
// one it has seen (across its reconnections), and no term that a holder
// recorded between the first and the last leader of a stream missing from
// that stream.
func TestElectionsUnderFaults(t *testing.T) {
	for _, topo := range faultTopologies {
		t.Run(topo.name, func(t *testing.T) {
			if topo.name != "redis" {
				t.Parallel()
			}
			runElectionFaults(t, topo)
		})
	}
}

// faultTopology starts two lockd replicas of one topology for a fault run:
// their bases, the proxies the run's phases apply to, and a failover of
// the election's master (nil on one Redis).
type faultTopology struct {
	name  string
	start func(t *testing.T) (bases []string, proxies []*proxy, failover func() error)
}

const faultElection = "fault:leader"

var faultTopologies = []faultTopology{
	{"redis", func(t *testing.T) ([]string, []*proxy, func() error) {
		rs := redistest.Start(t)
		px := startProxy(t, rs.Addr)
		var bases []string
		for range 2 {
			bases = append(bases, lockdtest.Start(t, lockdtest.Options{Redis: rs, RedisAddr: px.addr()}).URL)
		}
		return bases, []*proxy{px}, nil
	}},
	{"sentinel", func(t *testing.T) ([]string, []*proxy, func() error) {
		s := redistest.StartSentinel(t)
		bases, proxies := proxiedReplicas(t, func() redis.UniversalClient {
			o := &redis.UniversalOptions{Addrs: s.SentinelAddrs(), MasterName: s.MasterName()}
			store.Tune(o)
			return redis.NewFailoverClient(o.Failover())
		})
		return bases, proxies, func() error {
			_, err := s.Failover(context.Background())
			return err
		}
	}},
	{"cluster", func(t *testing.T) ([]string, []*proxy, func() error) {
		c := redistest.StartCluster(t)
		bases, proxies := proxiedReplicas(t, func() redis.UniversalClient {
			o := &redis.UniversalOptions{Addrs: c.Addrs()}
			store.Tune(o)
			return redis.NewClusterClient(o.Cluster())
		})
		return bases, proxies, func() error {
			ctx := context.Background()
			master, err := c.MasterForSlot(ctx, redistest.KeySlot("elect/"+faultElection))
			if err == nil {
				_, err = c.Failover(ctx, master)
			}
			return err
		}
	}},
}

// proxiedReplicas starts two lockds on clients of one topology, with
// replica acks, each behind a proxy of its own.
func proxiedReplicas(t *testing.T, client func() redis.UniversalClient) ([]string, []*proxy) {
	var bases []string
	var proxies []*proxy
	for range 2 {
		ld := lockdtest.Start(t, lockdtest.Options{Client: client(),
			Engine: lock.Options{ReplicaAcks: 1, ReplicaAckTimeout: time.Second}})
		t.Cleanup(func() {
			if t.Failed() {
				for _, line := range strings.Split(ld.Logs.String(), "\n") {
					if strings.Contains(line, `"level":"error"`) {
						t.Log(line)
					}
				}
			}
		})
		px := startProxy(t, strings.TrimPrefix(ld.URL, "http://"))
		bases = append(bases, "http://"+px.addr())
		proxies = append(proxies, px)
	}
	return bases, proxies
}

func runElectionFaults(t *testing.T, topo faultTopology) {
	bases, proxies, failover := topo.start(t)
	e := &electionFaults{t: t, httpc: &http.Client{}, counts: map[string]int{}}
	for _, b := range bases {
		e.replicas = append(e.replicas, b+"/v1/elections/"+faultElection)
	}
	phase := func(toxics ...string) {
		for _, px := range proxies {
			px.phase(t, toxics...)
		}
	}
	const (
		candidates = 6
		observers  = 4
		run        = 8 * time.Second
	)

	stopCandidates, stopObservers := make(chan struct{}), make(chan struct{})
	var candidatesDone, observersDone sync.WaitGroup
	streams := make([][][]observation, observers)
	for i := range observers {
		observersDone.Add(1)
		go func() {
			defer observersDone.Done()
			streams[i] = e.observe(i, stopObservers)
		}()
	}
	for i := range candidates {
		candidatesDone.Add(1)
		go func() {
			defer candidatesDone.Done()
			e.candidate(i, stopCandidates)
		}()
	}

	// The faults, as TestWaitersUnderFaults has them: quiet, latency,
	// every connection cut five times, latency with resets, quiet.
	const (
		latency = `{"name":"lat-down","type":"latency","stream":"downstream","attributes":{"latency":40,"jitter":30}}`
		latUp   = `{"name":"lat-up","type":"latency","stream":"upstream","attributes":{"latency":20,"jitter":20}}`
		resets  = `{"name":"reset","type":"reset_peer","toxicity":0.3,"attributes":{"timeout":200}}`
	)
	start := time.Now()
	time.Sleep(run / 6)
	phase(latency, latUp)
	time.Sleep(run / 6)
	for range 5 {
		phase()
		time.Sleep(run / 30)
	}
	if failover != nil {
		phase()
		if err := failover(); err != nil {
			t.Errorf("failover: %v", err)
		}
		e.count("failovers")
	}
	phase(latency, resets)
	time.Sleep(run / 6)
	phase()
	time.Sleep(run / 6)
	close(stopCandidates)
	candidatesDone.Wait()
	close(stopObservers)
	observersDone.Wait()
	elapsed := time.Since(start)

	// One leader at a time, and terms rising in the order of the grants.
	ls := e.leaderships
	sort.Slice(ls, func(i, j int) bool { return ls[i].start.Before(ls[j].start) })
	overlaps, regressions, never := 0, 0, 0
	var prev, latest *leadership // the one before, and of those so far the one that ended last
	for i := range ls {
		l := &ls[i]
		if !l.end.After(l.start) {
			// Its answer came after its expiry: it never led, as its
			// holder saw it, and when it was granted is not known.
			never++
			continue
		}
		if latest != nil && l.start.Before(latest.end) {
			overlaps++
			t.Errorf("two leaders at once: %s led term %d from %s to %s (%s), %s term %d from %s",
				latest.candidate, latest.term, latest.start.Format(time.StampMicro), latest.end.Format(time.StampMicro), latest.how,
				l.candidate, l.term, l.start.Format(time.StampMicro))
		}
		if prev != nil && l.term <= prev.term {
			regressions++
			t.Errorf("term %d (%s) granted after term %d (%s)", l.term, l.candidate, prev.term, prev.candidate)
		}
		prev = l
		if latest == nil || l.end.After(latest.end) {
			latest = l
		}
	}
	granted := make([]int64, 0, len(ls))
	for _, l := range ls {
		granted = append(granted, l.term)
	}
	slices.Sort(granted)

	// Every observer sees terms in order and misses none.
	events, opened := 0, 0
	for i, obs := range streams {
		for _, p := range observerProblems(obs, granted) {
			t.Errorf("observer %d: %s", i, p)
		}
		for _, evs := range obs {
			events += len(evs)
		}
		opened += len(obs)
	}

	kinds := make([]string, 0, len(e.counts))
	for k, n := range e.counts {
		kinds = append(kinds, fmt.Sprintf("%d %s", n, k))
	}
	sort.Strings(kinds)
	t.Logf("%v: %d leaderships (%s; %d answered after their expiry); %d overlapping, %d term regressions; %d observed events on %d streams",
		elapsed.Round(time.Millisecond), len(ls), strings.Join(kinds, ", "), never, overlaps, regressions, events, opened)
	if len(ls) < 10 {
		t.Fatalf("only %d leaderships in %v: candidates were not served", len(ls), run)
	}
}

// observerProblems checks what one observer read, stream by stream (it
// reconnected between them), against the terms that were granted (those
// the holders recorded; others may have been granted too):
//
//   - it never sees a term older than one it has seen, on any stream
//     (a vacant event's term 0 means "none known");
//   - each leader event's term is above the one before on its stream;
//   - a proclaimed event is of the leader the stream last announced;
//   - a granted term between a stream's first and last leader is on it.
//
// An observer that saw no term at all is a problem too.
func observerProblems(streams [][]observation, granted []int64) []string {
	var problems []string
	held := map[int64]bool{}
	for _, g := range granted {
		held[g] = true
	}
	// highest is the highest term seen, on any stream, that a candidate
	// held. A failover may lose a grant that was never acknowledged (its
	// replica ack did not come): observers may have been told of it, no
	// candidate led by it, and the state after the failover goes on
	// without it, so it does not raise the bar.
	var highest, anyTerm int64
	for s, evs := range streams {
		var leader, first int64 // the stream's current and first leader terms
		seen := map[int64]bool{}
		for _, ev := range evs {
			if ev.term != 0 && ev.term < highest {
				problems = append(problems, fmt.Sprintf("stream %d: %s of term %d after term %d: %v", s, ev.event, ev.term, highest, evs))
			}
			switch ev.event {
			case "leader":
				if leader != 0 && ev.term <= leader {
					problems = append(problems, fmt.Sprintf("stream %d: leader of term %d after leader of term %d: %v", s, ev.term, leader, evs))
				}
				leader, seen[ev.term] = ev.term, true
				if first == 0 {
					first = ev.term
				}
			case "proclaimed":
				if ev.term != leader {
					problems = append(problems, fmt.Sprintf("stream %d: proclaimed of term %d while the leader it announced is of term %d: %v", s, ev.term, leader, evs))
				}
			case "vacant":
			default:
				problems = append(problems, fmt.Sprintf("stream %d: an event %q", s, ev.event))
			}
			if held[ev.term] {
				highest = max(highest, ev.term)
			}
			anyTerm = max(anyTerm, ev.term)
		}
		for _, g := range granted {
			if g > first && g <= leader && !seen[g] {
				problems = append(problems, fmt.Sprintf("stream %d: term %d missing between terms %d and %d: %v", s, g, first, leader, evs))
			}
		}
	}
	if anyTerm == 0 {
		problems = append(problems, fmt.Sprintf("no term seen in %d streams", len(streams)))
	}
	return problems
}

// TestElectionObserveFirstRead changes the leader while an observer's
// stream is between its subscription and its first read of the state.
// The observer's lockd reaches Redis through a proxy that delays every
// reply by 300 ms; the leader and its successor go through another lockd,
// without delay, as soon as Redis has run the subscription's read of the
// stream's end (XINFO STREAM, counted in INFO commandstats), so that the
// change falls in the 300 ms before the stream's first read of the state.
// The events of that window reach the stream after its first read, which
// already describes the new leader: the old leader's proclaimed value
// among them must not be sent as news, with an older term than the
// leader the stream announced.
func TestElectionObserveFirstRead(t *testing.T) {
	rs := redistest.Start(t)
	admin := rs.Client(t)
	px := startProxy(t, rs.Addr)
	px.phase(t, `{"name":"slow","type":"latency","stream":"downstream","attributes":{"latency":300}}`)
	const name = "window:leader"
	fast := lockdtest.Start(t, lockdtest.Options{Redis: rs})
	slow := lockdtest.Start(t, lockdtest.Options{Redis: rs, RedisAddr: px.addr()})
	f := &electionFaults{t: t, httpc: &http.Client{}}
	base := fast.URL + "/v1/elections/" + name

	campaign := func(candidate string, wait time.Duration) api.Leadership {
		status, body, err := f.post(base+"/campaign", map[string]any{"candidate": candidate, "ttl_ms": 30000, "wait_ms": wait.Milliseconds()})
		var l api.Leadership
		if err != nil || status != http.StatusOK || json.Unmarshal(body, &l) != nil {
			t.Errorf("campaign of %s: %d %v %s", candidate, status, err, body)
		}
		return l
	}
	must := func(op string, body any) {
		t.Helper()
		if status, out, err := f.post(base+op, body); err != nil || status != http.StatusOK {
			t.Fatalf("%s: %d %v %s", op, status, err, out)
		}
	}
	xinfos := func() int {
		info, err := admin.Info(context.Background(), "commandstats").Result()
		if err != nil {
			t.Fatal(err)
		}
		_, stats, _ := strings.Cut(info, "cmdstat_xinfo|stream:calls=")
		n := 0
		fmt.Sscanf(stats, "%d", &n)
		return n
	}
	a := campaign("a", 0)
	next := make(chan api.Leadership, 1)
	go func() { next <- campaign("b", 10*time.Second) }()
	lockdtest.Eventually(t, func() bool {
		res, err := f.httpc.Get(base)
		if err != nil {
			return false
		}
		defer res.Body.Close()
		var st api.ElectionState
		return json.NewDecoder(res.Body).Decode(&st) == nil && len(st.Candidates) == 1
	}, 5*time.Second, "b in line")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, slow.URL+"/v1/elections/"+name+"/observe", nil)
	opened := make(chan *http.Response, 1)
	before := xinfos()
	go func() {
		res, err := f.httpc.Do(req)
		if err != nil {
			t.Errorf("observe: %v", err)
		}
		opened <- res
	}()
	lockdtest.Eventually(t, func() bool { return xinfos() > before }, 10*time.Second, "the observer's subscription")
	must("/proclaim", map[string]any{"token": a.Token, "value": "a's last word"})
	must("/resign", map[string]any{"token": a.Token})
	b := <-next

	res := <-opened
	if res == nil {
		return
	}
	defer res.Body.Close()
	events := make(chan sse)
	go readEvents(res.Body, events)
	defer func() {
		cancel()
		for range events {
		}
	}()
	var got []observation
	for len(got) == 0 || got[len(got)-1] != (observation{"proclaimed", b.Term}) {
		select {
		case ev := <-events:
			if ev.event == "" {
				continue // a heartbeat
			}
			var c api.ElectionChange
			if err := json.Unmarshal([]byte(ev.data), &c); err != nil {
				t.Fatalf("observed %s: %v: %s", ev.event, err, ev.data)
			}
			got = append(got, observation{ev.event, c.Term})
			if len(got) == 1 {
				// News after the first read: the stream must carry it.
				must("/proclaim", map[string]any{"token": b.Token, "value": "b's first word"})
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("b's proclaim not observed: %v (terms a %d, b %d)", got, a.Term, b.Term)
		}
	}
	if got[0] != (observation{"leader", b.Term}) {
		t.Logf("the first read did not find b: the change came after it (a slow machine); the stream told it in order")
	}
	for _, p := range observerProblems([][]observation{got}, []int64{a.Term, b.Term}) {
		t.Errorf("terms a %d, b %d: %s", a.Term, b.Term, p)
	}
}
