package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockd/lockd/internal/lock"
	"github.com/lockd/lockd/internal/lock/store"
	"github.com/lockd/lockd/internal/lockdtest"
	"github.com/lockd/lockd/internal/redistest"
)

// TestNoGrantBehindA409 runs contended waiters through two replicas while
// a proxy between lockd and Redis adds latency, each acquire with an owner
// of its own. A 409 means nothing was granted: no owner whose acquire was
// answered 409 may ever be named as a holder afterwards (a grant that
// landed in Redis as the wait ended, answered 409 and known to nobody,
// would hold the key until its TTL).
func TestNoGrantBehindA409(t *testing.T) {
	rs := redistest.Start(t)
	px := startProxy(t, rs.Addr)
	replicas := []string{
		lockdtest.Start(t, lockdtest.Options{Redis: rs, RedisAddr: px.addr()}).URL,
		lockdtest.Start(t, lockdtest.Options{Redis: rs, RedisAddr: px.addr()}).URL,
	}
	const (
		latDown = `{"name":"lat-down","type":"latency","stream":"downstream","attributes":{"latency":150,"jitter":150}}`
		latUp   = `{"name":"lat-up","type":"latency","stream":"upstream","attributes":{"latency":50,"jitter":50}}`
		resets  = `{"name":"reset","type":"reset_peer","toxicity":0.3,"attributes":{"timeout":200}}`
	)
	const run = 8 * time.Second
	noGrantBehindA409(t, replicas, run, func() {
		time.Sleep(run / 8)
		px.phase(t, latDown, latUp)
		time.Sleep(run * 3 / 8)
		px.phase(t, latDown, resets)
		time.Sleep(run * 3 / 8)
		px.phase(t)
		time.Sleep(run / 8)
	})
}

// TestNoGrantBehindA409OnSentinelFailovers is the same with two lockds on
// Sentinel, replica acks 1, and a SENTINEL FAILOVER every few seconds: a
// grant that a failover or a cut WAIT leaves behind an answer that is not
// a grant is given back (issue 35, item 9).
func TestNoGrantBehindA409OnSentinelFailovers(t *testing.T) {
	s := redistest.StartSentinel(t)
	var replicas []string
	for range 2 {
		o := &redis.UniversalOptions{Addrs: s.SentinelAddrs(), MasterName: s.MasterName()}
		store.Tune(o)
		ld := lockdtest.Start(t, lockdtest.Options{Client: redis.NewFailoverClient(o.Failover()),
			Engine: lock.Options{ReplicaAcks: 1, ReplicaAckTimeout: time.Second}})
		replicas = append(replicas, ld.URL)
	}
	const run = 12 * time.Second
	noGrantBehindA409(t, replicas, run, func() {
		end := time.Now().Add(run)
		for time.Now().Before(end) {
			time.Sleep(3 * time.Second)
			if _, err := s.Failover(context.Background()); err != nil {
				t.Logf("failover: %v", err)
			}
		}
	})
}

// noGrantBehindA409 runs contended waiters through replicas while disrupt
// runs, then checks that no owner answered 409 was named the holder by an
// acquire sent after that answer came back.
func noGrantBehindA409(t *testing.T, replicas []string, run time.Duration, disrupt func()) {
	keys := []string{"phantom:a", "phantom:b"}
	const (
		workers = 10
		ttlMs   = 3000
	)
	var (
		mu        sync.Mutex
		answered  = map[string]int{}       // owner → status of its acquire
		done      = map[string]time.Time{} // owner → when its answer came
		named     = map[string]int{}       // owner → 409s, sent after its own 409 came, that named it the holder
		requests  atomic.Int64
		statusesM sync.Mutex
		statuses  = map[int]int{}
	)
	httpc := &http.Client{Timeout: 10 * time.Second}
	// Each acquire carries an Idempotency-Key, as the clients' do.
	post := func(url string, body any) (int, []byte, error) {
		b, _ := json.Marshal(body)
		req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(b))
		if err != nil {
			return 0, nil, err
		}
		req.Header.Set("Content-Type", "application/json")
		if m, ok := body.(map[string]any); ok && m["owner"] != nil {
			req.Header.Set("Idempotency-Key", fmt.Sprint(m["owner"]))
		}
		res, err := httpc.Do(req)
		if err != nil {
			return 0, nil, err
		}
		defer res.Body.Close()
		out, err := io.ReadAll(res.Body)
		return res.StatusCode, out, err
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 11))
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				key := keys[r.IntN(len(keys))]
				base := replicas[r.IntN(len(replicas))] + "/v1/locks/" + key
				owner := fmt.Sprintf("w%d#%d", w, i)
				requests.Add(1)
				sent := time.Now()
				// Waits that end while the key changes hands: a few ms to
				// a few hundred, against holds of a few ms.
				status, body, err := post(base+"/acquire", map[string]any{"owner": owner, "ttl_ms": ttlMs, "wait_ms": 20 + r.IntN(300)})
				if err != nil {
					t.Errorf("acquire: %v", err)
					return
				}
				statusesM.Lock()
				statuses[status]++
				statusesM.Unlock()
				mu.Lock()
				answered[owner], done[owner] = status, time.Now()
				mu.Unlock()
				switch status {
				case http.StatusOK:
					var l struct {
						Token string `json:"token"`
					}
					_ = json.Unmarshal(body, &l)
					time.Sleep(time.Duration(1+r.IntN(5)) * time.Millisecond)
					_, _, _ = post(base+"/release", map[string]any{"token": l.Token})
				case http.StatusConflict:
					var p struct {
						Code   string `json:"code"`
						Holder string `json:"holder"`
					}
					_ = json.Unmarshal(body, &p)
					mu.Lock()
					// Only a request sent after the holder's own 409 came
					// back proves the grant outlived that answer.
					if at, ok := done[p.Holder]; p.Code == "lock_held" && ok && answered[p.Holder] == http.StatusConflict && sent.After(at) {
						named[p.Holder]++
					}
					mu.Unlock()
				}
			}
		}()
	}
	disrupt()
	close(stop)
	wg.Wait()

	phantoms := 0
	for owner, n := range named {
		phantoms++
		t.Errorf("%s was answered 409, then named the holder by %d acquires sent after that answer", owner, n)
	}
	t.Logf("%d acquires, answers %v; %d owners answered 409 and later named as holders", requests.Load(), statuses, phantoms)
}
