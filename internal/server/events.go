package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/lockd/lockd/api"
	"github.com/lockd/lockd/internal/lock"
	"github.com/lockd/lockd/internal/problem"
	"github.com/lockd/lockd/internal/wire"
)

// maxHistoryRead is how many events a typed history read looks through:
// every event a key keeps with the default --history-max, and then some.
const maxHistoryRead = 1000

// StreamEvents follows the event stream: the lifecycle events of the keys
// under prefix that the caller may read, as server-sent events.
func (s *Server) StreamEvents(ctx context.Context, r api.StreamEventsRequestObject) (api.StreamEventsResponseObject, error) {
	prefix, err := checkPrefix(r.Params.Prefix)
	if err != nil {
		return nil, err
	}
	c := callerOf(ctx)
	keys, err := s.checkEventKeys(c, r.Params.Key)
	if err != nil {
		return nil, err
	}
	scan, filter, err := listScope(c, s.cfg.Keys, prefix)
	if err != nil && keys == nil {
		return nil, err
	}
	if err != nil {
		// Exact keys the API key may read need no prefix of its own.
		scan, filter = prefix, true
	}
	after := ""
	if r.Params.LastEventID != nil {
		after = strings.TrimSpace(*r.Params.LastEventID)
		if !lock.ValidEventID(after) {
			return nil, lock.ErrBadEventID // 400, named by problem.Of
		}
	}
	if after != "" {
		if err := s.checkResume(ctx); err != nil {
			return nil, err
		}
	}
	sub, release, err := s.subscribe(ctx, after)
	if err != nil {
		return nil, err
	}
	if err := s.chargeResume(ctx, sub); err != nil {
		sub.Close()
		release()
		return nil, err
	}
	// The prefix (narrowed to the API key's one prefix under it) and the
	// key's prefixes apply to a semaphore's name as to a lock's key.
	keep := func(res lock.Resource) bool {
		if keys != nil {
			if _, ok := keys[res.Name]; !ok {
				return false
			}
		}
		return strings.HasPrefix(res.Name, scan) && (!filter || c.mayTouch(s.cfg.Keys, res.Name))
	}
	return &eventStream{s: s, ctx: ctx, sub: sub, keep: keep, release: release}, nil
}

// maxEventKeys is the most exact keys one event stream follows.
const maxEventKeys = 100

// checkEventKeys validates the stream's exact keys (nil when none are
// given): each a key the caller may read, at most maxEventKeys of them.
func (s *Server) checkEventKeys(c caller, v *[]string) (map[string]struct{}, error) {
	if v == nil || len(*v) == 0 {
		return nil, nil
	}
	if len(*v) > maxEventKeys {
		return nil, invalid("key", "at most %d keys per event stream, got %d", maxEventKeys, len(*v))
	}
	keys := make(map[string]struct{}, len(*v))
	for _, k := range *v {
		if !lock.ValidKey(k) {
			return nil, invalid("key", "key %q must be 1-200 characters of A-Z a-z 0-9 . _ : @ -, starting with a letter or digit", k)
		}
		if !c.mayTouch(s.cfg.Keys, k) {
			return nil, problem.Errorf(problem.ErrForbidden, "API key %s may not read %s", c.name, k)
		}
		keys[k] = struct{}{}
	}
	return keys, nil
}

// subscribe follows the event stream after the event with ID after, within
// the API key's share and the server's cap of event streams; release gives
// both back once the subscription is closed.
func (s *Server) subscribe(ctx context.Context, after string) (*lock.Subscription, func(), error) {
	// The key's share first: a key at its quota takes no slot of the
	// server's.
	releaseQuota, err := s.take(ctx, quotaEventStreams)
	if err != nil {
		return nil, nil, err
	}
	select {
	case s.streams <- struct{}{}:
	default:
		releaseQuota()
		return nil, nil, problem.Errorf(problem.ErrTooManyStreams, "this server already keeps %d event streams open", cap(s.streams))
	}
	release := func() {
		<-s.streams
		releaseQuota()
	}
	sub, err := s.engine.Subscribe(ctx, after)
	if err != nil {
		release()
		return nil, nil, err
	}
	return sub, release, nil
}

// eventStream writes the events; it implements the generated response
// interface so that it can stream and flush.
type eventStream struct {
	s    *Server
	ctx  context.Context
	sub  *lock.Subscription
	keep func(res lock.Resource) bool
	// release gives back the stream's slot and its key's quota.
	release func()
}

// VisitStreamEventsResponse runs the stream until the client leaves, the
// server shuts down or the client reads too slowly (then the stream ends,
// and the client resumes with Last-Event-ID).
func (es *eventStream) VisitStreamEventsResponse(w http.ResponseWriter) error {
	defer func() {
		es.sub.Close()
		es.release()
	}()
	ctx, cancel := context.WithCancel(es.ctx)
	defer cancel()
	go func() {
		select {
		case <-es.s.closing:
			cancel()
		case <-ctx.Done():
		}
	}()

	write := startSSE(w).write
	if err := write(": lockd events\n\n"); err != nil {
		return nil
	}
	beat := es.s.cfg.HoldHeartbeat
	last := time.Now()
	for {
		wait, cancelWait := context.WithDeadline(ctx, last.Add(beat))
		c, err := es.sub.Next(wait)
		cancelWait()
		switch {
		case err == nil && c.Type == lock.Reset:
			// Not an event of a key: every reader is told.
			b, _ := json.Marshal(api.StreamReset{Id: c.ID, Reason: api.StreamResetReason(c.Reason)})
			if err := write(fmt.Sprintf("id: %s\nevent: %s\ndata: %s\n\n", c.ID, lock.Reset, b)); err != nil {
				return nil
			}
			last = time.Now()
		case err == nil:
			if !es.keep(c.Resource) {
				continue
			}
			b, _ := json.Marshal(wire.LockEventOf(c))
			if err := write(fmt.Sprintf("id: %s\nevent: %s\ndata: %s\n\n", c.ID, c.Type, b)); err != nil {
				return nil
			}
			last = time.Now()
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, context.DeadlineExceeded):
			if err := write(": heartbeat\n\n"); err != nil {
				return nil
			}
			last = time.Now()
		case errors.Is(err, lock.ErrUnavailable):
			// Redis is away for a moment: keep the stream, try again.
			select {
			case <-time.After(200 * time.Millisecond):
			case <-ctx.Done():
				return nil
			}
		default:
			// Too slow, or the engine closed: end the stream; the client
			// reconnects with Last-Event-ID.
			return nil
		}
	}
}
