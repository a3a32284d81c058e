package webhook

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"gopkg.in/yaml.v3"

	"github.com/lockd/lockd/internal/lock"
	"github.com/lockd/lockd/internal/server"
)

// Hook is one endpoint of the webhooks file.
type Hook struct {
	// Name labels the endpoint's metrics and logs; default the URL's host.
	Name string `yaml:"name"`
	URL  string `yaml:"url"`
	// Secret signs every delivery (Lockd-Signature); never logged.
	Secret string `yaml:"secret"`
	// Events are the event types to deliver; empty: every lifecycle event.
	Events []string `yaml:"events"`
	// Prefixes limit the lock keys and semaphore names; empty: every
	// lock and semaphore.
	Prefixes []string `yaml:"prefixes"`
}

// MinSecretLen is the shortest secret accepted.
const MinSecretLen = 16

var eventTypes = map[string]bool{"acquired": true, "reentered": true, "released": true, "expired": true, "force_released": true}

// Parse reads a webhooks file:
//
//	webhooks:
//	  - url: https://ops.example.com/lockd
//	    secret: "at least 16 characters"
//	    events: [expired, force_released]
//	    prefixes: ["deploy:"]
func Parse(data []byte) ([]Hook, error) {
	var f struct {
		Webhooks []Hook `yaml:"webhooks"`
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("webhooks: %w", err)
	}
	names := map[string]bool{}
	for i := range f.Webhooks {
		h := &f.Webhooks[i]
		u, err := url.Parse(h.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("webhooks[%d]: url must be an http:// or https:// URL", i)
		}
		if len(h.Secret) < MinSecretLen {
			return nil, fmt.Errorf("webhooks[%d] (%s): secret must be at least %d characters", i, u.Host, MinSecretLen)
		}
		for _, e := range h.Events {
			if !eventTypes[e] {
				return nil, fmt.Errorf("webhooks[%d] (%s): events: %q is not one of acquired, reentered, released, expired, force_released", i, u.Host, e)
			}
		}
		for _, p := range h.Prefixes {
			if !lock.ValidPrefix(p) {
				return nil, fmt.Errorf("webhooks[%d] (%s): prefixes: %q is not the start of a lock key", i, u.Host, p)
			}
		}
		if h.Name == "" {
			h.Name = u.Host
		}
		if names[h.Name] {
			return nil, fmt.Errorf("webhooks[%d]: two endpoints named %q: give each a name", i, h.Name)
		}
		names[h.Name] = true
	}
	return f.Webhooks, nil
}

// wants says whether the hook delivers this event. Prefixes apply to a
// semaphore's name (not its engine key) as to a lock's key.
func (h Hook) wants(c lock.Change) bool {
	if len(h.Events) > 0 && !contains(h.Events, c.Type) {
		return false
	}
	if len(h.Prefixes) == 0 {
		return true
	}
	name, _ := lock.SplitKey(c.Key)
	for _, p := range h.Prefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

func contains(xs []string, x string) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

// group is the hook's consumer group: one per URL, so that renaming a hook
// keeps its place and two replicas with the same file share it.
func (h Hook) group() string {
	sum := sha256.Sum256([]byte(h.URL))
	return "webhook:" + hex.EncodeToString(sum[:8])
}

// Sign is the Lockd-Signature of body sent at t: "t=<unix seconds>,v1=<hex
// HMAC-SHA256(secret, "<t>.<body>")>".
func Sign(secret string, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(ts + "."))
	m.Write(body)
	return "t=" + ts + ",v1=" + hex.EncodeToString(m.Sum(nil))
}

// Options tune delivery. Zero values take the defaults.
type Options struct {
	// Timeout bounds one attempt (default 5 s).
	Timeout time.Duration
	// BackoffMin is the wait before the first retry (default 10 s), doubled
	// at each attempt up to BackoffMax (default 10 min). It is kept above
	// Timeout, so that no attempt in flight is claimed by another replica.
	BackoffMin, BackoffMax time.Duration
	// GiveUpAfter is how long after the event it is retried (default 2 h).
	GiveUpAfter time.Duration
	// Poll is how often pending deliveries are looked at (default 1 s).
	Poll time.Duration
	// Consumer names this replica in the consumer groups.
	Consumer string
	// Client sends the POSTs (default a client with Timeout).
	Client *http.Client
	// OnError hears of Redis errors (for logs); it must not block.
	OnError func(hook string, err error)
}

// Dispatcher delivers the event stream to the hooks.
type Dispatcher struct {
	rdb    redis.Cmdable
	stream string
	hooks  []Hook
	opts   Options
	m      *metrics
}

// New returns a dispatcher of stream (lock.Engine.EventStream) on rdb.
// Its metrics are registered on reg (may be nil).
func New(rdb redis.Cmdable, stream string, hooks []Hook, opts Options, reg prometheus.Registerer) *Dispatcher {
	if opts.Timeout <= 0 {
		opts.Timeout = 5 * time.Second
	}
	if opts.BackoffMin <= 0 {
		opts.BackoffMin = 10 * time.Second
	}
	opts.BackoffMin = max(opts.BackoffMin, opts.Timeout+opts.Timeout/2)
	if opts.BackoffMax <= 0 {
		opts.BackoffMax = 10 * time.Minute
	}
	opts.BackoffMax = max(opts.BackoffMax, opts.BackoffMin)
	if opts.GiveUpAfter <= 0 {
		opts.GiveUpAfter = 2 * time.Hour
	}
	if opts.Poll <= 0 {
		opts.Poll = time.Second
	}
	if opts.Consumer == "" {
		opts.Consumer = "lockd"
	}
	if opts.Client == nil {
		opts.Client = &http.Client{Timeout: opts.Timeout}
	}
	return &Dispatcher{rdb: rdb, stream: stream, hooks: hooks, opts: opts, m: newMetrics(reg)}
}

// Run delivers until ctx ends.
func (d *Dispatcher) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, h := range d.hooks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d.runHook(ctx, h)
		}()
	}
	wg.Wait()
}

func (d *Dispatcher) fail(h Hook, err error) {
	if d.opts.OnError != nil && err != nil {
		d.opts.OnError(h.Name, err)
	}
}

// runHook reads new events of the hook's group and, every Poll, retries
// the pending ones whose backoff has passed.
func (d *Dispatcher) runHook(ctx context.Context, h Hook) {
	group := h.group()
	ready := false
	lastPoll := time.Time{}
	for ctx.Err() == nil {
		if !ready {
			err := d.rdb.XGroupCreateMkStream(ctx, d.stream, group, "$").Err()
			if err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") {
				d.fail(h, err)
				sleep(ctx, time.Second)
				continue
			}
			ready = true
		}
		res, err := d.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{
			Group: group, Consumer: d.opts.Consumer, Streams: []string{d.stream, ">"},
			Count: 50, Block: d.opts.Poll,
		}).Result()
		switch {
		case err == nil:
			for _, st := range res {
				for _, m := range st.Messages {
					d.handle(ctx, h, group, m, 1)
				}
			}
		case errors.Is(err, redis.Nil):
		case ctx.Err() != nil:
			return
		default:
			if strings.HasPrefix(err.Error(), "NOGROUP") {
				ready = false // the stream or group was lost (a Redis restart)
			}
			d.fail(h, err)
			sleep(ctx, time.Second)
		}
		if time.Since(lastPoll) >= d.opts.Poll {
			lastPoll = time.Now()
			d.retry(ctx, h, group)
			d.backlog(ctx, h, group)
		}
	}
}

// backoff is the wait before attempt n+1 after n attempts.
func (d *Dispatcher) backoff(n int64) time.Duration {
	b := d.opts.BackoffMin
	for i := int64(1); i < n && b < d.opts.BackoffMax; i++ {
		b *= 2
	}
	return min(b, d.opts.BackoffMax)
}

// retry claims the pending deliveries whose backoff has passed and tries
// them again. XCLAIM's min-idle-time makes the claim one replica's.
func (d *Dispatcher) retry(ctx context.Context, h Hook, group string) {
	pending, err := d.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{
		Stream: d.stream, Group: group, Idle: d.opts.BackoffMin, Start: "-", End: "+", Count: 100,
	}).Result()
	if err != nil {
		if !errors.Is(err, redis.Nil) {
			d.fail(h, err)
		}
		return
	}
	for _, p := range pending {
		wait := d.backoff(p.RetryCount)
		if p.Idle < wait {
			continue
		}
		if eventAge(p.ID) > d.opts.GiveUpAfter {
			d.rdb.XAck(ctx, d.stream, group, p.ID)
			d.m.deliveries.WithLabelValues(h.Name, "gave_up").Inc()
			continue
		}
		msgs, err := d.rdb.XClaim(ctx, &redis.XClaimArgs{
			Stream: d.stream, Group: group, Consumer: d.opts.Consumer, MinIdle: wait, Messages: []string{p.ID},
		}).Result()
		if err != nil {
			d.fail(h, err)
			continue
		}
		if len(msgs) == 0 {
			// Another replica claimed it first, or the stream trimmed it.
			if gone, _ := d.rdb.XRange(ctx, d.stream, p.ID, p.ID).Result(); len(gone) == 0 {
				d.rdb.XAck(ctx, d.stream, group, p.ID)
				d.m.deliveries.WithLabelValues(h.Name, "dropped").Inc()
			}
			continue
		}
		for _, m := range msgs {
			d.handle(ctx, h, group, m, p.RetryCount+1)
		}
	}
}

// backlog sets the hook's backlog gauge: pending deliveries plus events
// the group has not read yet.
func (d *Dispatcher) backlog(ctx context.Context, h Hook, group string) {
	groups, err := d.rdb.XInfoGroups(ctx, d.stream).Result()
	if err != nil {
		return
	}
	for _, g := range groups {
		if g.Name == group {
			d.m.backlog.WithLabelValues(h.Name).Set(float64(g.Pending + max(g.Lag, 0)))
		}
	}
}

// handle delivers one event (or acks one the hook does not want).
func (d *Dispatcher) handle(ctx context.Context, h Hook, group string, m redis.XMessage, attempt int64) {
	c := lock.ChangeOf(m)
	if !h.wants(c) {
		d.rdb.XAck(ctx, d.stream, group, m.ID)
		return
	}
	err := d.post(ctx, h, c)
	if err != nil {
		d.m.deliveries.WithLabelValues(h.Name, "failed").Inc()
		d.fail(h, fmt.Errorf("event %s, attempt %d: %w", m.ID, attempt, err))
		return // stays pending: retried after its backoff
	}
	if err := d.rdb.XAck(ctx, d.stream, group, m.ID).Err(); err != nil {
		d.fail(h, err)
	}
	d.m.deliveries.WithLabelValues(h.Name, "delivered").Inc()
	d.m.latency.WithLabelValues(h.Name).Observe(eventAge(m.ID).Seconds())
}

// post sends one event; any answer but 2xx, or none within the timeout, is
// an error.
func (d *Dispatcher) post(ctx context.Context, h Hook, c lock.Change) error {
	// The event stream's shape: a semaphore's name with kind semaphore.
	body, err := json.Marshal(server.LockEventOf(c))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, d.opts.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.URL, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "lockd-webhook/1")
	req.Header.Set("Lockd-Event-Id", c.ID)
	req.Header.Set("Lockd-Signature", Sign(h.Secret, time.Now(), body))
	resp, err := d.opts.Client.Do(req)
	if err != nil {
		// Without the URL, which may carry credentials.
		var uerr *url.Error
		if errors.As(err, &uerr) {
			return uerr.Err
		}
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("answered %d", resp.StatusCode)
	}
	return nil
}

// eventAge is how long ago the event with stream ID id was added.
func eventAge(id string) time.Duration {
	ms, _, _ := strings.Cut(id, "-")
	n, err := strconv.ParseInt(ms, 10, 64)
	if err != nil {
		return 0
	}
	return time.Since(time.UnixMilli(n))
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-time.After(d):
	case <-ctx.Done():
	}
}

type metrics struct {
	deliveries *prometheus.CounterVec
	latency    *prometheus.HistogramVec
	backlog    *prometheus.GaugeVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lockd_webhook_deliveries_total",
			Help: "Webhook delivery attempts by endpoint and outcome: delivered, failed (retried later), gave_up, dropped (trimmed from the stream before delivery).",
		}, []string{"hook", "outcome"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "lockd_webhook_delivery_seconds", Help: "Time from an event to its successful delivery, retries included.",
			Buckets: []float64{.01, .05, .1, .25, .5, 1, 2.5, 10, 60, 600, 3600},
		}, []string{"hook"}),
		backlog: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "lockd_webhook_backlog", Help: "Events not yet delivered to an endpoint: pending retries plus unread events.",
		}, []string{"hook"}),
	}
	if reg != nil {
		reg.MustRegister(m.deliveries, m.latency, m.backlog)
	}
	return m
}
