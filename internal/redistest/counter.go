package redistest

import (
	"context"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// Counter is a go-redis hook that counts what a client sends: Commands (a
// pipeline's each), RoundTrips (a pipeline is one) and Singles (commands
// sent outside pipelines).
type Counter struct {
	Commands, RoundTrips, Singles atomic.Int64
}

func (c *Counter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *Counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.Commands.Add(1)
		c.RoundTrips.Add(1)
		c.Singles.Add(1)
		return next(ctx, cmd)
	}
}

func (c *Counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.Commands.Add(int64(len(cmds)))
		c.RoundTrips.Add(1)
		return next(ctx, cmds)
	}
}
