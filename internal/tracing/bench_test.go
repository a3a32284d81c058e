package tracing_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/lockd/lockd/internal/tracing"
)

// BenchmarkRequestSpan prices tracing per request, in-process: a request
// span started from a traceparent and ended, with one child span (a Redis
// command's), without an endpoint (trace ids only) and exporting over
// OTLP/HTTP to an endpoint that drops what it gets.
//
//	go test -run '^$' -bench RequestSpan -benchmem ./internal/tracing/
func BenchmarkRequestSpan(b *testing.B) {
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
	}))
	defer sink.Close()
	exporting, err := tracing.New(context.Background(), tracing.Config{Endpoint: sink.URL})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = exporting.Shutdown(context.Background()) }()
	h := http.Header{"Traceparent": {"00-" + callerTrace + "-" + callerSpan + "-01"}}
	for _, c := range []struct {
		name   string
		tracer *tracing.Tracer
	}{{"ids-only", nil}, {"exporting", exporting}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				ctx, span := c.tracer.StartRequest(context.Background(), h, "POST")
				_ = tracing.TraceID(ctx)
				_, child := c.tracer.Start(ctx, "fcall")
				child.End()
				tracing.EndRequest(span, "POST", "/v1/locks/{key}/acquire", 200, "k", "lock")
			}
		})
	}
}
