package store

import (
	"context"
	"runtime"
	"sync"

	"github.com/redis/go-redis/v9"
)

// batcher sends the scripts that callers run at the same time as one
// pipeline: one write and one read for many calls, on both sides of the
// connection. A system call costs about as much as a small script on a
// virtual machine, and every lock operation is one short script, so under
// load most of a call's cost was its own write and read; batched, it is
// shared.
//
// As many round trips as there are slots (one per CPU, at least two) are
// in flight at once. A call that finds a slot free and nobody queued runs
// on its own goroutine; otherwise it queues, and a few flushers each take
// whatever calls are queued once a slot frees and send them together. So a
// lone call goes out at once (no timer, no hand-over) and batches grow
// only while earlier round trips are in flight. Calls in one batch run in
// the order they were queued, each one atomic as ever; a caller's context
// still bounds its wait, and a call whose context ended before it was sent
// is not sent.
//
// go-redis's own AutoPipeline does this too, but it is marked experimental
// and most of its code is about modes lockd does not use; this is the part
// lockd needs.
type batcher struct {
	rdb   redis.UniversalClient
	calls chan *scriptCall
	// slots holds one token per round trip in flight, a lone call's or a
	// batch's: a call that finds a free slot and nobody queued goes out
	// on its own goroutine, with no hand-over to a flusher.
	slots chan struct{}
	stop  chan struct{}
	done  sync.WaitGroup
	once  sync.Once
	// fns runs scripts as functions where it can (Store.UseFunctions);
	// loadFns loads its library.
	fns     *Functions
	loadFns func(context.Context) error
}

// scriptCall is one queued script and, once done is sent to, its result.
type scriptCall struct {
	ctx  context.Context
	sc   *redis.Script
	keys []string
	args []any
	val  any
	err  error
	done chan struct{}
}

// maxBatch bounds one pipeline: enough to share the round trip widely,
// small enough that one batch's replies never wait long on the others'.
const maxBatch = 64

// newBatcher starts its flushers: as many as there are CPUs (at least
// two), so that a batch can be written while another is read.
// runOne runs one script call on its own: an FCALL of its function where
// the library has one (loaded first if the server lacks it), else EVALSHA
// with EVAL on NOSCRIPT.
func (b *batcher) runOne(ctx context.Context, sc *redis.Script, keys []string, args []any) (any, error) {
	if fn := b.fns.name(sc); fn != "" {
		v, err := b.rdb.FCall(ctx, fn, keys, args...).Result()
		if !missing(err) {
			return v, err
		}
		if err := b.loadFns(ctx); err != nil {
			return nil, err
		}
		if fn := b.fns.name(sc); fn != "" {
			return b.rdb.FCall(ctx, fn, keys, args...).Result()
		}
	}
	return sc.Run(ctx, b.rdb, keys, args...).Result()
}

func newBatcher(rdb redis.UniversalClient) *batcher {
	n := max(2, runtime.GOMAXPROCS(0))
	b := &batcher{rdb: rdb, calls: make(chan *scriptCall, 4*maxBatch), slots: make(chan struct{}, n), stop: make(chan struct{})}
	b.done.Add(n)
	for range n {
		go b.flusher()
	}
	return b
}

// run runs the script, on the caller's goroutine when a slot is free and
// nobody is queued, else in the next batch, and waits for its result or
// the end of ctx. A flusher waiting for a slot gets the next one freed
// before any caller (a channel's blocked sender goes first), so queued
// calls are not overtaken for long.
func (b *batcher) run(ctx context.Context, sc *redis.Script, keys []string, args []any) (any, error) {
	select {
	case <-b.stop:
		return nil, ErrClosed
	default:
	}
	select {
	case b.slots <- struct{}{}:
		if len(b.calls) == 0 {
			v, err := b.runOne(ctx, sc, keys, args)
			<-b.slots
			return v, err
		}
		<-b.slots
	default:
	}
	command := "evalsha"
	if b.fns.name(sc) != "" {
		command = "fcall"
	}
	span := batchedSpan(ctx, command)
	v, err := b.enqueue(ctx, sc, keys, args)
	endBatchedSpan(span, err)
	return v, err
}

// enqueue puts the call in the next batch and waits for its answer or the
// end of ctx.
func (b *batcher) enqueue(ctx context.Context, sc *redis.Script, keys []string, args []any) (any, error) {
	c := calls.Get().(*scriptCall)
	c.ctx, c.sc, c.keys, c.args = ctx, sc, keys, args
	select {
	case b.calls <- c:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-b.stop:
		return nil, ErrClosed
	}
	select {
	case <-c.done:
		return c.answer()
	case <-ctx.Done():
		// c is left to the flusher, never reused: its answer comes later.
		return nil, ctx.Err()
	case <-b.stop:
		// Closing lets the batch in flight finish: its answer stands.
		b.done.Wait()
		select {
		case <-c.done:
			return c.answer()
		default:
			return nil, ErrClosed
		}
	}
}

// calls are scriptCalls to reuse: a call answered while its caller waited
// goes back (done is buffered, sent to once per use).
var calls = sync.Pool{New: func() any { return &scriptCall{done: make(chan struct{}, 1)} }}

// answer reads the call's result and puts it back for reuse.
func (c *scriptCall) answer() (any, error) {
	v, err := c.val, c.err
	*c = scriptCall{done: c.done}
	calls.Put(c)
	return v, err
}

func (b *batcher) flusher() {
	defer b.done.Done()
	batch := make([]*scriptCall, 0, maxBatch)
	cmds := make([]*redis.Cmd, 0, maxBatch)
	for {
		select {
		case c := <-b.calls:
			batch = append(batch[:0], c)
		case <-b.stop:
			return
		}
		select {
		case b.slots <- struct{}{}:
		case <-b.stop:
			b.fail(batch)
			return
		}
	more:
		for len(batch) < maxBatch {
			select {
			case c := <-b.calls:
				batch = append(batch, c)
			default:
				break more
			}
		}
		cmds = b.send(batch, cmds[:0])
		<-b.slots
		clear(batch)
		clear(cmds)
	}
}

// send runs the live calls of batch in one pipeline and answers each; cmds
// is room for the pipeline's commands, returned for reuse.
//
// The pipeline has no deadline of its own: the client's read and write
// timeouts bound it (ioTimeout, shorter than any caller's), and each
// caller stops waiting at its own deadline.
func (b *batcher) send(batch []*scriptCall, cmds []*redis.Cmd) []*redis.Cmd {
	live := batch[:0]
	for _, c := range batch {
		if err := c.ctx.Err(); err != nil {
			c.err = err
			c.done <- struct{}{}
			continue
		}
		live = append(live, c)
	}
	ctx := context.Background()
	switch len(live) {
	case 0:
		return cmds
	case 1:
		c := live[0]
		c.val, c.err = b.runOne(ctx, c.sc, c.keys, c.args)
		c.done <- struct{}{}
		return cmds
	}
	_, _ = b.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, c := range live {
			if fn := b.fns.name(c.sc); fn != "" {
				cmds = append(cmds, p.FCall(ctx, fn, c.keys, c.args...))
			} else {
				cmds = append(cmds, c.sc.EvalSha(ctx, p, c.keys, c.args...))
			}
		}
		return nil
	})
	for i, c := range live {
		c.val, c.err = cmds[i].Result()
		switch {
		case c.err != nil && redis.HasErrorPrefix(c.err, "NOSCRIPT"):
			// A server that lost its scripts (a restart, a failover to a
			// replica that never loaded them): EVAL loads it again.
			c.val, c.err = c.sc.Eval(ctx, b.rdb, c.keys, c.args...).Result()
		case missing(c.err):
			// Or its functions: runOne loads them again.
			c.val, c.err = b.runOne(ctx, c.sc, c.keys, c.args)
		}
		c.done <- struct{}{}
	}
	return cmds
}

// fail answers calls ErrClosed.
func (b *batcher) fail(batch []*scriptCall) {
	for _, c := range batch {
		c.err = ErrClosed
		c.done <- struct{}{}
	}
}

// close stops the flushers; calls still queued or made later answer
// ErrClosed.
func (b *batcher) close() {
	b.once.Do(func() {
		close(b.stop)
		b.done.Wait()
		for {
			select {
			case c := <-b.calls:
				b.fail([]*scriptCall{c})
			default:
				return
			}
		}
	})
}
