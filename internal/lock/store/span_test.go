package store

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/lockd/lockd/internal/redistest"
)

// A script call that goes out in a batch has a span of its own under its
// caller's span (the flusher's pipeline knows no caller), named after the
// command, with no argument in it; a caller without a recording span gets
// none.
func TestBatchedCallsHaveSpans(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	b := newBatcher(rdb)
	defer b.close()
	script := redis.NewScript(`return ARGV[1]`)

	ctx, parent := tp.Tracer("test").Start(context.Background(), "request")
	const callers = 64
	var wg sync.WaitGroup
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := b.run(ctx, script, []string{"k" + strconv.Itoa(i)}, []any{"secret-argument"}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	// Untraced callers: no spans.
	for i := range callers {
		if _, err := b.run(context.Background(), script, []string{"u" + strconv.Itoa(i)}, []any{"x"}); err != nil {
			t.Fatal(err)
		}
	}
	parent.End()

	batched := 0
	for _, s := range rec.Ended() {
		if s.Name() == "request" {
			continue
		}
		batched++
		if s.Name() != "evalsha" || s.Parent().SpanID() != parent.SpanContext().SpanID() {
			t.Errorf("span %q under %v, want evalsha under the request", s.Name(), s.Parent().SpanID())
		}
		for _, a := range s.Attributes() {
			if strings.Contains(a.Value.String(), "secret-argument") {
				t.Errorf("span %q carries an argument: %v", s.Name(), a)
			}
		}
	}
	// Calls that found a free slot ran on their caller's goroutine, where
	// the client's own hook would trace them; 64 at once on a handful of
	// slots leave most to the batches.
	if batched == 0 || batched > callers {
		t.Fatalf("%d spans of batched calls for %d traced calls", batched, callers)
	}
	t.Logf("%d of %d traced calls went out in batches, each with its span", batched, callers)
}
