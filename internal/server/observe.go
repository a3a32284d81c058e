package server

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/lockd/lockd/api"
	"github.com/lockd/lockd/internal/lock"
)

// ObserveElection follows one election's leadership as server-sent
// events: the current leader (or vacant) at once, then every change.
func (s *Server) ObserveElection(ctx context.Context, r api.ObserveElectionRequestObject) (api.ObserveElectionResponseObject, error) {
	// Subscribed before the first read: a change between the two is sent
	// after it, never lost.
	sub, release, err := s.subscribe(ctx, "")
	if err != nil {
		return nil, err
	}
	o := &observeStream{s: s, ctx: ctx, res: lock.Election(r.Key), sub: sub, release: release}
	// The first read comes before the answer, so that Redis failing it is
	// a 503 the client can retry, not an empty stream.
	if o.firstEvent, o.first, err = o.read(ctx); err != nil {
		sub.Close()
		release()
		return nil, err
	}
	return o, nil
}

// observeStream writes an election's changes; it implements the generated
// response interface so that it can stream and flush.
type observeStream struct {
	s       *Server
	ctx     context.Context
	res     lock.Resource
	sub     *lock.Subscription
	release func()
	// term is the newest term sent, so that a change already described
	// (by the first read, or a resynchronisation) is not sent again;
	// leader is the term of the leader the stream last announced (0 after
	// a vacancy), the only one whose proclaims it sends.
	term, leader int64
	// firstEvent and first are the stream's first event, read before the
	// answer began.
	firstEvent string
	first      api.ElectionChange
}

// VisitObserveElectionResponse runs the stream until the client leaves,
// the server shuts down or the client reads too slowly.
func (o *observeStream) VisitObserveElectionResponse(w http.ResponseWriter) error {
	defer func() {
		o.sub.Close()
		o.release()
	}()
	ctx, cancel := context.WithCancel(o.ctx)
	defer cancel()
	go func() {
		select {
		case <-o.s.closing:
			cancel()
		case <-ctx.Done():
		}
	}()
	out := startSSE(w)
	if out.send(o.firstEvent, o.first) != nil {
		return nil
	}
	beat, last := o.s.cfg.HoldHeartbeat, time.Now()
	for {
		wait, cancelWait := context.WithDeadline(ctx, last.Add(beat))
		c, err := o.sub.Next(wait)
		cancelWait()
		switch {
		case err == nil && c.Type == lock.Reset:
			// Events were missed: the current state says where things are.
			err = o.current(ctx, out)
		case err == nil && c.Resource == o.res:
			err = o.change(ctx, out, c)
		case err == nil:
			continue
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, context.DeadlineExceeded):
			err = out.write(": heartbeat\n\n")
		default:
			return nil // the subscription ended; the client reconnects
		}
		if err != nil {
			return nil
		}
		last = time.Now()
	}
}

// current sends the leader, or vacant, as a read finds them.
func (o *observeStream) current(ctx context.Context, out sse) error {
	event, change, err := o.read(ctx)
	if err != nil {
		return err
	}
	return out.send(event, change)
}

// read is the leader, or vacant, as the state says now.
func (o *observeStream) read(ctx context.Context) (string, api.ElectionChange, error) {
	st, err := o.s.engine.State(ctx, o.res)
	switch {
	case errors.Is(err, lock.ErrNotFound):
		if o.term == 0 {
			// A new stream: the vacancy is of the last term there was,
			// so that no event of an older one (of the moments before
			// this read, or one a failover's old master wrote late) is
			// taken for news.
			if evs, err := o.s.engine.History(ctx, o.res, 1); err == nil && len(evs) > 0 {
				o.term = evs[0].Fence
			}
		}
		o.leader = 0
		return "vacant", api.ElectionChange{Key: o.res.Name, Term: o.term}, nil
	case err != nil:
		return "", api.ElectionChange{}, err
	}
	o.term, o.leader = st.Fence, st.Fence
	return "leader", leaderChange(o.res, st), nil
}

// change sends what one event of the election means to an observer.
func (o *observeStream) change(ctx context.Context, out sse, c lock.Change) error {
	switch c.Type {
	case "acquired":
		if c.Fence <= o.term {
			return nil // sent already, by a read
		}
		o.term, o.leader = c.Fence, c.Fence
		ch := api.ElectionChange{Key: o.res.Name, Leader: &c.Owner, Term: c.Fence, Since: &c.At}
		if st, err := o.s.engine.State(ctx, o.res); err == nil && st.Fence == c.Fence {
			ch = leaderChange(o.res, st)
		}
		return out.send("leader", ch)
	case "proclaimed":
		if c.Fence != o.leader {
			// Not the leader this stream last described: a value of a
			// term that ended before the first read (or a resync) found
			// another leader or none, an event of the moments between
			// the subscription and that read. Sent, it would take the
			// observer back to an older term.
			return nil
		}
		ch := api.ElectionChange{Key: o.res.Name, Leader: &c.Owner, Term: c.Fence}
		if st, err := o.s.engine.State(ctx, o.res); err == nil && st.Fence == c.Fence {
			ch = leaderChange(o.res, st)
		}
		return out.send("proclaimed", ch)
	case "released", "expired", "force_released":
		if c.Fence < o.term {
			return nil // an older term, superseded already
		}
		o.term, o.leader = c.Fence, 0
		return out.send("vacant", api.ElectionChange{Key: o.res.Name, Term: c.Fence})
	default:
		return nil // reentered: the same term goes on
	}
}

// leaderChange is the leader a state describes.
func leaderChange(res lock.Resource, st lock.State) api.ElectionChange {
	return api.ElectionChange{
		Key: res.Name, Leader: &st.Owner, Term: st.Fence, Value: valueOrNil(st.Value),
		Since: &st.AcquiredAt, ExpiresAt: &st.ExpiresAt,
	}
}
