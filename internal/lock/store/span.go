package store

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// batchedSpan is the span of a script call that goes out in a batch: the
// pipeline is sent by a flusher with no request's context, so the Redis
// client's own tracing (cmd/lockd's hook) does not see whose call it is.
// The span is made on the caller's goroutine, from its enqueueing to its
// answer, with the tracer of the caller's span: none when the caller's
// context has no recording span (no exporter, or a call outside a
// request). Only the command's name is recorded, never its arguments.
func batchedSpan(ctx context.Context, command string) trace.Span {
	parent := trace.SpanFromContext(ctx)
	if !parent.IsRecording() {
		return parent // not recording: End and SetStatus do nothing
	}
	_, span := parent.TracerProvider().Tracer("github.com/lockd/lockd/internal/lock/store").Start(ctx, command,
		trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("db.system", "redis"), attribute.String("db.operation.name", command),
			attribute.Bool("lockd.batched", true)))
	return span
}

// endBatchedSpan ends a batched call's span, marking an error (not a nil
// reply, an answer like any other).
func endBatchedSpan(span trace.Span, err error) {
	if err != nil && !errors.Is(err, redis.Nil) && span.IsRecording() {
		span.SetStatus(codes.Error, "redis error")
	}
	span.End()
}
