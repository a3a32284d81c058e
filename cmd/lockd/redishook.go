package main

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// redisHook counts the commands lockd sends to Redis and the ones that
// failed, so that calls per operation can be read off /metrics, and times
// each round trip, so that a slow Redis shows before lockd's own answers
// slow down.
type redisHook struct {
	commands prometheus.Counter
	errors   prometheus.Counter
	// duration by call: "script" (one EVALSHA/EVAL/FCALL, an operation's
	// one round trip), "pipeline" (calls sent together, a grant with its
	// WAIT for replica acks among them) or "command" (any other).
	duration *prometheus.HistogramVec
	script   prometheus.Observer
	pipeline prometheus.Observer
	command  prometheus.Observer
}

// redisBuckets span a loopback round trip (0.1 ms) to the call timeout
// (about 2 s).
var redisBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}

func newRedisHook(reg prometheus.Registerer) redisHook {
	h := redisHook{
		commands: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "lockd_redis_commands_total", Help: "Commands sent to Redis (a pipeline counts each command).",
		}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "lockd_redis_errors_total", Help: "Redis commands that failed (timeouts, refused connections, error replies).",
		}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "lockd_redis_call_duration_seconds",
			Help:    "Round trips to Redis, by call: script (an operation's one script call), pipeline (calls sent together) or command; blocking reads are not timed.",
			Buckets: redisBuckets,
		}, []string{"call"}),
	}
	h.script = h.duration.WithLabelValues("script")
	h.pipeline = h.duration.WithLabelValues("pipeline")
	h.command = h.duration.WithLabelValues("command")
	reg.MustRegister(h.commands, h.errors, h.duration)
	return h
}

func (h redisHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h redisHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.commands.Inc()
		start := time.Now()
		err := next(ctx, cmd)
		if o := h.observer(cmd.Name()); o != nil {
			o.Observe(time.Since(start).Seconds())
		}
		h.count(err)
		return err
	}
}

func (h redisHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.commands.Add(float64(len(cmds)))
		start := time.Now()
		err := next(ctx, cmds)
		h.pipeline.Observe(time.Since(start).Seconds())
		h.count(err)
		return err
	}
}

// observer is the series a command's round trip goes to; nil for a read
// that blocks on purpose (the webhook queue's XREADGROUP BLOCK), whose
// time says nothing of Redis's speed.
func (h redisHook) observer(name string) prometheus.Observer {
	switch name {
	case "evalsha", "eval", "evalsha_ro", "eval_ro", "fcall", "fcall_ro":
		return h.script
	case "xreadgroup", "xread", "blpop", "brpop", "bzpopmin", "bzpopmax", "wait":
		return nil
	default:
		return h.command
	}
}

func (h redisHook) count(err error) {
	// NOSCRIPT is the expected first EVALSHA; go-redis retries with EVAL.
	if err != nil && !errors.Is(err, redis.Nil) && !redis.HasErrorPrefix(err, "NOSCRIPT") {
		h.errors.Inc()
	}
}
