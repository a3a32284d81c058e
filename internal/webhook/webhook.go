package webhook

import (
	"bytes"
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"gopkg.in/yaml.v3"

	"github.com/lockd/lockd/internal/lock"
	"github.com/lockd/lockd/internal/wire"
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
	// AllowPrivate lets deliveries go to loopback, private and link-local
	// addresses (privateAddr): an endpoint on this host or the internal
	// network. Without it such a URL is refused at start, and a delivery
	// whose name resolves to such an address is refused when it dials, so
	// that neither the file nor DNS points lockd at internal services.
	AllowPrivate bool `yaml:"allow_private"`
	// Concurrency is how many deliveries to the endpoint may be in flight
	// at once (default Options.Concurrency); 1 delivers one at a time, in
	// the stream's order.
	Concurrency int `yaml:"concurrency"`
}

// MinSecretLen is the shortest secret accepted.
const MinSecretLen = 16

// MaxConcurrency is the most deliveries in flight to one endpoint.
const MaxConcurrency = 64

// ErrPrivateAddress refuses a delivery to a loopback, private or
// link-local address of an endpoint without allow_private.
var ErrPrivateAddress = errors.New("webhook: loopback, private or link-local address, and the endpoint has no allow_private")

var eventTypes = map[string]bool{"acquired": true, "reentered": true, "released": true, "expired": true, "force_released": true, "proclaimed": true,
	"release_requested": true, "restored": true}

// Parse reads a webhooks file:
//
//	webhooks:
//	  - url: https://ops.example.com/lockd
//	    secret: "at least 16 characters"
//	    events: [expired, force_released]
//	    prefixes: ["deploy:"]
//	    allow_private: false   # true: may deliver to loopback, private, link-local addresses
//	    concurrency: 8         # deliveries in flight at once; 1: one at a time, in order
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
		if !h.AllowPrivate && privateHost(u.Hostname()) {
			return nil, fmt.Errorf("webhooks[%d] (%s): a loopback, private or link-local address needs allow_private: true", i, u.Host)
		}
		if h.Concurrency < 0 || h.Concurrency > MaxConcurrency {
			return nil, fmt.Errorf("webhooks[%d] (%s): concurrency must be between 1 and %d (0: the default)", i, u.Host, MaxConcurrency)
		}
		if len(h.Secret) < MinSecretLen {
			return nil, fmt.Errorf("webhooks[%d] (%s): secret must be at least %d characters", i, u.Host, MinSecretLen)
		}
		for _, e := range h.Events {
			if !eventTypes[e] {
				return nil, fmt.Errorf("webhooks[%d] (%s): events: %q is not one of acquired, reentered, released, expired, force_released, proclaimed", i, u.Host, e)
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

// Plaintext reports whether deliveries go over plain http:// to another
// host than this one: whoever is on the path can read them and hold them
// back (the signature stops changes, not reading). lockd warns of it at
// start.
func (h Hook) Plaintext() bool {
	u, err := url.Parse(h.URL)
	if err != nil || !strings.EqualFold(u.Scheme, "http") {
		return false
	}
	host := u.Hostname()
	if ip, err := netip.ParseAddr(host); err == nil {
		return !ip.Unmap().IsLoopback()
	}
	return !isLocalhost(host)
}

// The address blocks that privateAddr refuses besides Go's own tests.
var (
	thisNetwork = netip.MustParsePrefix("0.0.0.0/8")     // "this host" on Linux
	sharedSpace = netip.MustParsePrefix("100.64.0.0/10") // carrier-grade NAT; some clouds' metadata
	siteLocal   = netip.MustParsePrefix("fec0::/10")     // deprecated IPv6 private
)

// privateAddr reports whether ip is an address of this host or of an
// internal network: loopback, private (RFC 1918, fc00::/7, fec0::/10),
// link-local (169.254.0.0/16 with the clouds' metadata services,
// fe80::/10), unspecified or 0.0.0.0/8 (this host), 100.64.0.0/10
// (shared), or multicast. IPv4-mapped IPv6 addresses count as their IPv4.
func privateAddr(ip netip.Addr) bool {
	ip = ip.Unmap()
	return ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() ||
		ip.IsInterfaceLocalMulticast() || ip.IsMulticast() || ip.IsUnspecified() ||
		thisNetwork.Contains(ip) || sharedSpace.Contains(ip) || siteLocal.Contains(ip)
}

// privateHost reports whether a URL's host is, as written, a private
// address or a name of this host (localhost). Other names are checked
// when a delivery dials them.
func privateHost(host string) bool {
	if ip, err := netip.ParseAddr(host); err == nil {
		return privateAddr(ip)
	}
	return isLocalhost(host)
}

func isLocalhost(host string) bool {
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	return host == "localhost" || strings.HasSuffix(host, ".localhost")
}

// checkDial is a net.Dialer's Control: it refuses a connection to a
// private address (privateAddr). It runs after the name was resolved,
// for each address tried, so that DNS cannot point a public name at an
// internal service.
func checkDial(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("webhook: cannot check the address %s: %w", address, err)
	}
	if privateAddr(ap.Addr()) {
		return fmt.Errorf("%w (%s)", ErrPrivateAddress, ap.Addr())
	}
	return nil
}

// errRedirect marks a 3xx answer: redirects are not followed, so that an
// endpoint cannot send lockd's signed POST to another address.
var errRedirect = errors.New("redirects are not followed")

// newClient is the HTTP client of one endpoint. It never follows a
// redirect (a 3xx is a failed delivery); without AllowPrivate it refuses
// to connect to a private address. Behind a proxy from the environment
// (HTTPS_PROXY, HTTP_PROXY, NO_PROXY) it connects to the proxy only, and
// the proxy decides which addresses it reaches: Parse still refuses a
// private address written in the URL.
func newClient(h Hook, timeout time.Duration, conc int) *http.Client {
	dialer := &net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil
	tr.MaxIdleConnsPerHost = conc // a connection per delivery in flight, kept
	if u, err := url.Parse(h.URL); err == nil {
		if proxy, err := http.ProxyFromEnvironment(&http.Request{URL: u}); err == nil && proxy != nil {
			tr.Proxy = http.ProxyURL(proxy)
		}
	}
	if !h.AllowPrivate && tr.Proxy == nil {
		dialer.Control = checkDial
	}
	tr.DialContext = dialer.DialContext
	return &http.Client{
		Timeout:   timeout,
		Transport: tr,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
}

// wants says whether the hook delivers this event. Prefixes apply to a
// semaphore's name as to a lock's key.
func (h Hook) wants(c lock.Change) bool {
	if len(h.Events) > 0 && !contains(h.Events, c.Type) {
		return false
	}
	if len(h.Prefixes) == 0 {
		return true
	}
	for _, p := range h.Prefixes {
		if strings.HasPrefix(c.Resource.Name, p) {
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
	// Concurrency is how many deliveries to one endpoint may be in flight
	// at once, unless its Hook says otherwise (default 8, at most
	// MaxConcurrency).
	Concurrency int
	// Consumer names this replica in the consumer groups.
	Consumer string
	// OnError hears of Redis errors and failed deliveries (for logs); it
	// must not block.
	OnError func(hook string, err error)
}

// Dispatcher delivers the event stream to the hooks.
type Dispatcher struct {
	rdb    redis.Cmdable
	stream string
	hooks  []endpoint
	opts   Options
	m      *metrics
}

// endpoint is a hook with what delivers to it.
type endpoint struct {
	Hook
	client *http.Client
	// slots holds one token per delivery in flight (cap: the hook's
	// concurrency).
	slots chan struct{}
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
	if opts.Concurrency <= 0 {
		opts.Concurrency = 8
	}
	if opts.Consumer == "" {
		opts.Consumer = "lockd"
	}
	d := &Dispatcher{rdb: rdb, stream: stream, opts: opts, m: newMetrics(reg)}
	for _, h := range hooks {
		conc := min(cmp.Or(h.Concurrency, opts.Concurrency), MaxConcurrency)
		d.hooks = append(d.hooks, endpoint{Hook: h, client: newClient(h, opts.Timeout, conc), slots: make(chan struct{}, conc)})
	}
	return d
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

func (d *Dispatcher) fail(h endpoint, err error) {
	if d.opts.OnError != nil && err != nil {
		d.opts.OnError(h.Name, err)
	}
}

// runHook reads new events of the hook's group and, every Poll, retries
// the pending ones whose backoff has passed. Each delivery runs on its own
// goroutine, at most the hook's concurrency at once, and is XACKed when
// it ends with a 2xx: a slow endpoint takes up to concurrency events per
// round trip, not one. The loop reads only as many events as slots are
// free, so that an event read is in flight at once: none waits in this
// process long enough for another replica to claim it as failed.
func (d *Dispatcher) runHook(ctx context.Context, h endpoint) {
	var inflight sync.WaitGroup
	defer inflight.Wait()
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
		free := takeSlots(ctx, h.slots)
		if free == 0 {
			return // ctx ended
		}
		res, err := d.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{
			Group: group, Consumer: d.opts.Consumer, Streams: []string{d.stream, ">"},
			Count: int64(free), Block: d.opts.Poll,
		}).Result()
		switch {
		case err == nil:
			for _, st := range res {
				for _, m := range st.Messages {
					free--
					d.start(ctx, h, group, m, 1, &inflight)
				}
			}
		case errors.Is(err, redis.Nil):
		case ctx.Err() != nil:
		default:
			if strings.HasPrefix(err.Error(), "NOGROUP") {
				ready = false // the stream or group was lost (a Redis restart)
			}
			d.fail(h, err)
			sleep(ctx, time.Second)
		}
		giveSlots(h.slots, free)
		if ctx.Err() == nil && time.Since(lastPoll) >= d.opts.Poll {
			lastPoll = time.Now()
			d.retry(ctx, h, group, &inflight)
			d.backlog(ctx, h, group)
		}
	}
}

// takeSlots waits for a free delivery slot of slots, then takes every
// other one free now, and returns how many it took (0 when ctx ended).
func takeSlots(ctx context.Context, slots chan struct{}) int {
	select {
	case slots <- struct{}{}:
	case <-ctx.Done():
		return 0
	}
	n := 1
	for n < cap(slots) {
		select {
		case slots <- struct{}{}:
			n++
		default:
			return n
		}
	}
	return n
}

// giveSlots frees n slots taken by takeSlots.
func giveSlots(slots chan struct{}, n int) {
	for range n {
		<-slots
	}
}

// start handles one event on a slot taken for it, which it frees when
// done: an event the hook does not want is acked at once, one it wants is
// delivered on its own goroutine.
func (d *Dispatcher) start(ctx context.Context, h endpoint, group string, m redis.XMessage, attempt int64, inflight *sync.WaitGroup) {
	c := lock.ChangeOf(m)
	if !h.wants(c) {
		d.rdb.XAck(ctx, d.stream, group, m.ID)
		giveSlots(h.slots, 1)
		return
	}
	inflight.Add(1)
	go func() {
		defer inflight.Done()
		defer giveSlots(h.slots, 1)
		d.deliver(ctx, h, group, m.ID, c, attempt)
	}()
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
// them again, as many as slots are free. XCLAIM's min-idle-time makes the
// claim one replica's.
func (d *Dispatcher) retry(ctx context.Context, h endpoint, group string, inflight *sync.WaitGroup) {
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
		select {
		case h.slots <- struct{}{}:
		default:
			return // every slot is busy: the next poll goes on
		}
		msgs, err := d.rdb.XClaim(ctx, &redis.XClaimArgs{
			Stream: d.stream, Group: group, Consumer: d.opts.Consumer, MinIdle: wait, Messages: []string{p.ID},
		}).Result()
		if err != nil || len(msgs) == 0 {
			giveSlots(h.slots, 1)
		}
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
		d.start(ctx, h, group, msgs[0], p.RetryCount+1, inflight)
	}
}

// backlog sets the hook's backlog gauge: pending deliveries plus events
// the group has not read yet.
func (d *Dispatcher) backlog(ctx context.Context, h endpoint, group string) {
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

// deliver POSTs one event and acks it on a 2xx; on a failure it stays
// pending, retried after its backoff. The failure's reason goes to
// OnError (the admin's log), never to metrics: webhooks are the admin's
// configuration, and with redirects refused and private addresses
// allowed only per hook, the reason tells of no address but the
// endpoint's own.
func (d *Dispatcher) deliver(ctx context.Context, h endpoint, group, id string, c lock.Change, attempt int64) {
	if err := d.post(ctx, h, c); err != nil {
		d.m.deliveries.WithLabelValues(h.Name, "failed").Inc()
		d.fail(h, fmt.Errorf("event %s, attempt %d: %w", id, attempt, err))
		return
	}
	if err := d.rdb.XAck(ctx, d.stream, group, id).Err(); err != nil {
		d.fail(h, err)
	}
	d.m.deliveries.WithLabelValues(h.Name, "delivered").Inc()
	d.m.latency.WithLabelValues(h.Name).Observe(eventAge(id).Seconds())
}

// post sends one event; any answer but 2xx (a redirect included), or none
// within the timeout, is an error.
func (d *Dispatcher) post(ctx context.Context, h endpoint, c lock.Change) error {
	// The event stream's shape: a semaphore's name with kind semaphore.
	body, err := json.Marshal(wire.LockEventOf(c))
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
	resp, err := h.client.Do(req)
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
	switch {
	case resp.StatusCode >= 300 && resp.StatusCode <= 399:
		return fmt.Errorf("answered %d: %w", resp.StatusCode, errRedirect)
	case resp.StatusCode < 200 || resp.StatusCode > 299:
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
