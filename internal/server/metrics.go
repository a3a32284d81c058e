package server

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/lockd/lockd/internal/lock"
)

// metrics are the server's Prometheus series. Labels never carry a lock
// key (unbounded) or a token (secret).
type metrics struct {
	requests    *prometheus.CounterVec
	duration    *prometheus.HistogramVec
	outcomes    *prometheus.CounterVec
	waitSeconds prometheus.Histogram
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
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lockd_acquire_total", Help: "Acquire outcomes: granted, reentered, replayed, held, lease_lost, unavailable, error.",
		}, []string{"outcome"}),
		waitSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "lockd_acquire_wait_seconds", Help: "Time acquires with wait_ms > 0 spent waiting, whatever the outcome.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 4, 10),
		}),
	}
	waiters := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "lockd_waiters", Help: "Acquire requests now waiting in this process.",
	}, func() float64 { return float64(e.Waiters()) })
	if reg != nil {
		reg.MustRegister(m.requests, m.duration, m.outcomes, m.waitSeconds, waiters)
	}
	return m
}

func (m *metrics) acquire(o lock.Outcome, err error) {
	outcome := string(o)
	switch {
	case err == nil:
	case errors.Is(err, lock.ErrHeld):
		outcome = "held"
	case errors.Is(err, lock.ErrLeaseLost):
		outcome = "lease_lost"
	case errors.Is(err, lock.ErrUnavailable):
		outcome = "unavailable"
	default:
		outcome = "error"
	}
	m.outcomes.WithLabelValues(outcome).Inc()
}

// instrument counts requests by their route pattern, never the raw path.
func (m *metrics) instrument(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		ww := middleware.NewWrapResponseWriter(w, r.ProtoMajor)
		next.ServeHTTP(ww, r)
		route := routePattern(r)
		m.requests.WithLabelValues(route, r.Method, strconv.Itoa(ww.Status())).Inc()
		m.duration.WithLabelValues(route).Observe(time.Since(start).Seconds())
	})
}

func routePattern(r *http.Request) string {
	if rctx := chi.RouteContext(r.Context()); rctx != nil {
		if p := rctx.RoutePattern(); p != "" {
			return p
		}
	}
	return "unmatched"
}
