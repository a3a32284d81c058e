package main

import (
	"context"
	"errors"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// redisHook counts the commands lockd sends to Redis and the ones that
// failed, so that calls per operation can be read off /metrics.
type redisHook struct {
	commands prometheus.Counter
	errors   prometheus.Counter
}

func newRedisHook(reg prometheus.Registerer) redisHook {
	h := redisHook{
		commands: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "lockd_redis_commands_total", Help: "Commands sent to Redis (a pipeline counts each command).",
		}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "lockd_redis_errors_total", Help: "Redis commands that failed (timeouts, refused connections, error replies).",
		}),
	}
	reg.MustRegister(h.commands, h.errors)
	return h
}

func (h redisHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h redisHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.commands.Inc()
		err := next(ctx, cmd)
		h.count(err)
		return err
	}
}

func (h redisHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.commands.Add(float64(len(cmds)))
		err := next(ctx, cmds)
		h.count(err)
		return err
	}
}

func (h redisHook) count(err error) {
	// NOSCRIPT is the expected first EVALSHA; go-redis retries with EVAL.
	if err != nil && !errors.Is(err, redis.Nil) && !redis.HasErrorPrefix(err, "NOSCRIPT") {
		h.errors.Inc()
	}
}
