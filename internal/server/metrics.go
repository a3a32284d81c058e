package server

import (
	"context"
	"errors"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/lockd/lockd/internal/lock"
)

// metrics are the server's Prometheus series. Labels never carry a lock
// key (unbounded) or a token (secret).
type metrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	// series keeps the request series by route, method and status, found
	// once: WithLabelValues hashes and compares its labels on every call.
	// The labels come from fixed sets, so this stays small.
	series sync.Map // requestLabels → *requestSeries
}

type requestLabels struct {
	route, method string
	status        int
}

type requestSeries struct {
	count   prometheus.Counter
	latency prometheus.Observer
}

// request counts one request that took d.
func (m *metrics) request(route, method string, status int, d time.Duration) {
	if status < 100 || status > 599 {
		status = 0 // statusLabel's "other"
	}
	k := requestLabels{route, method, status}
	v, ok := m.series.Load(k)
	if !ok {
		v, _ = m.series.LoadOrStore(k, &requestSeries{
			count:   m.requests.WithLabelValues(route, method, statusLabel(status)),
			latency: m.duration.WithLabelValues(route),
		})
	}
	s := v.(*requestSeries)
	s.count.Inc()
	s.latency.Observe(d.Seconds())
}

func newMetrics(reg prometheus.Registerer, e Engine) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lockd_http_requests_total", Help: "HTTP requests by route, method and status.",
		}, []string{"route", "method", "status"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "lockd_http_request_duration_seconds", Help: "HTTP request latency by route (waits included).",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"route"}),
	}
	waiters := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "lockd_waiters", Help: "Acquire requests now waiting in this process.",
	}, func() float64 { return float64(e.Waiters()) })
	if reg != nil {
		reg.MustRegister(m.requests, m.duration, waiters)
		// Asked with a context already done, HeldKeys says whether it is
		// supported without a call to Redis.
		done, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := e.HeldKeys(done); !errors.Is(err, lock.ErrUnsupported) {
			reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "lockd_keys_held",
				Help: "Keys (locks, semaphores, elections) that hold at least one lease now, across every replica; read from Redis at each scrape (not on Cluster or Redlock).",
			}, func() float64 {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				defer cancel()
				n, err := e.HeldKeys(ctx)
				if err != nil {
					return math.NaN() // Redis did not answer: no number beats a wrong one
				}
				return float64(n)
			}))
		}
		for _, o := range []struct {
			outcome string
			of      func(lock.Restored) int
		}{
			{"restored", func(r lock.Restored) int { return r.Restored }},
			{"present", func(r lock.Restored) int { return r.Present }},
			{"conflict", func(r lock.Restored) int { return r.Conflicts }},
		} {
			reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name:        "lockd_leases_restored_total",
				Help:        "Leases and sessions this lockd put back after Redis lost its data: restored, present (already back), conflict (the key held by a newer lease).",
				ConstLabels: prometheus.Labels{"outcome": o.outcome},
			}, func() float64 { return float64(o.of(e.RestoredLeases())) }))
		}
		if _, err := e.MissedAcks(); !errors.Is(err, lock.ErrUnsupported) {
			reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name: "lockd_replica_acks_missed_total",
				Help: "Writes that fewer replicas acknowledged than --replica-acks asks for (each answered 503).",
			}, func() float64 {
				n, _ := e.MissedAcks()
				return float64(n)
			}))
		}
	}
	return m
}

// methodLabel is the method when it is one of HTTP's standard ones, else
// "other".
func methodLabel(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions, http.MethodConnect, http.MethodTrace:
		return m
	}
	return "other"
}

// statusLabel is the status code; handlers only write codes from 100 to
// 599, and anything else is folded so the set stays fixed.
func statusLabel(code int) string {
	if code < 100 || code > 599 {
		return "other"
	}
	return strconv.Itoa(code)
}

// unmatchedRoute labels every request that matched no route (404, and 405
// on an unknown path), whatever its path.
const unmatchedRoute = "unmatched"

// routePattern is the chi route template of the request: one of the
// routes that Handler registers, or unmatchedRoute.
func routePattern(r *http.Request) string {
	rctx := chi.RouteContext(r.Context())
	if rctx == nil {
		return unmatchedRoute
	}
	p := rctx.RoutePattern()
	// A route template has no wildcard other than the assets' trailing
	// "/*"; chi leaves a bare "/*" or an empty pattern when nothing matched.
	if p == "" || p == "/*" {
		return unmatchedRoute
	}
	return p
}
