package tracing

import (
	"context"
	"errors"
	"net"
	"os"
	"strings"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Attribute keys of Redis spans. Only the command's name is recorded,
// never its arguments: they carry lease tokens, owners and values.
const (
	attrDBSystem   = attribute.Key("db.system")
	attrDBOp       = attribute.Key("db.operation.name")
	attrDBBatch    = attribute.Key("db.operation.batch.size")
	attrDBCommands = attribute.Key("db.redis.commands")
	attrDBStatus   = attribute.Key("db.response.status_code")
)

var dbSystem = attrDBSystem.String("redis")

// RedisHook is a go-redis hook that makes a span for each command
// (named after the command: evalsha, get…) and each pipeline ("pipeline",
// or "multi" for a transaction, with the commands' names) that a traced
// request sends. A command sent outside a recording span (lockd's
// background work: expiry sweeps, the event stream's reader, probes) makes
// none. Install it on every client lockd builds: single, Sentinel, Cluster
// and each Redlock master.
func (t *Tracer) RedisHook() redis.Hook { return redisHook{t: t} }

type redisHook struct{ t *Tracer }

func (h redisHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h redisHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !h.t.Enabled() || !trace.SpanFromContext(ctx).IsRecording() {
			return next(ctx, cmd)
		}
		name := cmd.Name()
		ctx, span := h.t.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient),
			trace.WithAttributes(dbSystem, attrDBOp.String(name)))
		err := next(ctx, cmd)
		endRedis(span, err)
		return err
	}
}

func (h redisHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if !h.t.Enabled() || !trace.SpanFromContext(ctx).IsRecording() {
			return next(ctx, cmds)
		}
		name := "pipeline"
		names := make([]string, len(cmds))
		for i, c := range cmds {
			names[i] = c.Name()
		}
		if len(names) > 0 && names[0] == "multi" {
			name = "multi"
		}
		ctx, span := h.t.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient),
			trace.WithAttributes(dbSystem, attrDBOp.String(name), attrDBBatch.Int(len(cmds)), attrDBCommands.StringSlice(names)))
		err := next(ctx, cmds)
		endRedis(span, err)
		return err
	}
}

// endRedis ends a Redis span. A failure is described by its class only
// (a Redis error's code such as ERR or READONLY, timeout, canceled), not
// its message, which may quote a script. A nil reply is no failure, nor is
// NOSCRIPT: go-redis answers it by sending the script with EVAL.
func endRedis(span trace.Span, err error) {
	if err != nil && !errors.Is(err, redis.Nil) {
		class := errorClass(err)
		span.SetAttributes(attrDBStatus.String(class))
		if class != "NOSCRIPT" {
			span.SetStatus(codes.Error, class)
		}
	}
	span.End()
}

func errorClass(err error) string {
	var rerr redis.Error
	if errors.As(err, &rerr) {
		code, _, _ := strings.Cut(rerr.Error(), " ")
		if isErrorCode(code) {
			return code
		}
		return "error"
	}
	var nerr net.Error
	switch {
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded),
		errors.As(err, &nerr) && nerr.Timeout():
		return "timeout"
	}
	return "error"
}

// isErrorCode says whether s looks like a Redis error code (ERR, WRONGTYPE,
// NOSCRIPT…): a few capital letters, nothing taken from a command.
func isErrorCode(s string) bool {
	if s == "" || len(s) > 20 {
		return false
	}
	for _, c := range s {
		if c < 'A' || c > 'Z' {
			return false
		}
	}
	return true
}
