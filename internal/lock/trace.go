package lock

import "context"

// traceKey carries a request's trace id in its context.
type traceKey struct{}

// WithTrace returns ctx carrying the trace id of the request it serves
// (W3C, 32 hex digits): the history events the request causes record it,
// so that an event leads to the request's trace and log line. Anything
// that is not such an id is ignored.
func WithTrace(ctx context.Context, traceID string) context.Context {
	if !validTraceID(traceID) {
		return ctx
	}
	return context.WithValue(ctx, traceKey{}, traceID)
}

// traceOf is the trace id WithTrace put in ctx, or "".
func traceOf(ctx context.Context) string {
	id, _ := ctx.Value(traceKey{}).(string)
	return id
}

func validTraceID(id string) bool {
	if len(id) != 32 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}
