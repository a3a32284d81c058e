package server

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/lockd/lockd/api"
	"github.com/lockd/lockd/internal/lock"
	"github.com/lockd/lockd/internal/problem"
)

// Sessions (lock/session.go): one keep-alive for many grants. A session's
// id is a secret like a token, so every session operation needs the
// write scope, and the id is never logged or shown. A session belongs to
// the API key that made it (sessionScope): to any other key its id names
// no session.

// sessionScope is the scope of the caller's sessions: its API key's name,
// or "" with auth off. By name, not by the key's hash, so that a key
// whose secret is replaced under the same name keeps its sessions; a key
// renamed in the auth file no longer finds the sessions it made, which
// lapse at their TTL with their grants.
func sessionScope(c caller) string {
	if c.key == nil {
		return ""
	}
	return c.key.Name
}

// sessionOf is a session on the wire; the id only when it was just made.
func sessionOf(s lock.Session) api.Session {
	out := api.Session{Owner: s.Owner, TtlMs: s.TTL.Milliseconds(), CreatedAt: s.CreatedAt, ExpiresAt: s.ExpiresAt,
		Holds: []api.SessionHold{}}
	if s.ID != "" {
		out.Session = ptr(s.ID)
	}
	for _, r := range s.Holds {
		h := api.SessionHold{Kind: api.SessionHoldKind(r.Kind.String()), Key: r.Name}
		if rq, ok := s.Requests[r]; ok {
			h.ReleaseRequested = &api.ReleaseRequested{By: rq.By, Reason: rq.Reason, At: rq.At}
		}
		out.Holds = append(out.Holds, h)
	}
	return out
}

// checkSessionID refuses an id of the wrong shape with a 400 naming field;
// a well-formed id of no live session is the engine's 404.
func checkSessionID(field, id string) error {
	if !lock.ValidSessionID(id) {
		return invalid(field, "%s must be a session id as POST /v1/sessions answered it: 32 characters of A-Z, a-z, 0-9, - and _", field)
	}
	return nil
}

// CreateSession starts a session.
func (s *Server) CreateSession(ctx context.Context, r api.CreateSessionRequestObject) (api.CreateSessionResponseObject, error) {
	c := callerOf(ctx)
	owner := c.name
	var ttlMs *int64
	if r.Body != nil {
		if r.Body.Owner != nil {
			if err := checkOwner(*r.Body.Owner); err != nil {
				return nil, err
			}
			owner = *r.Body.Owner
		}
		ttlMs = r.Body.TtlMs
	}
	ttl, err := s.ttlRange(c, "ttl_ms", ttlMs, s.cfg.DefaultTTL, lock.MinSessionTTL, lock.MaxSessionTTL)
	if err != nil {
		return nil, err
	}
	logOwner(ctx, owner)
	sess, err := s.engine.CreateSession(ctx, sessionScope(c), owner, ttl)
	if err != nil {
		return nil, err
	}
	return api.CreateSession201JSONResponse(sessionOf(sess)), nil
}

// GetSession reads a session and what it holds.
func (s *Server) GetSession(ctx context.Context, r api.GetSessionRequestObject) (api.GetSessionResponseObject, error) {
	if err := checkSessionID("id", r.Id); err != nil {
		return nil, err
	}
	sess, err := s.engine.GetSession(ctx, sessionScope(callerOf(ctx)), r.Id)
	if err != nil {
		return nil, err
	}
	return api.GetSession200JSONResponse(sessionOf(sess)), nil
}

// RenewSession renews a session and every grant in it.
func (s *Server) RenewSession(ctx context.Context, r api.RenewSessionRequestObject) (api.RenewSessionResponseObject, error) {
	if err := checkSessionID("id", r.Id); err != nil {
		return nil, err
	}
	c := callerOf(ctx)
	sess, err := s.engine.RenewSession(ctx, sessionScope(c), r.Id, c.name)
	if err != nil {
		return nil, err
	}
	return api.RenewSession200JSONResponse(sessionOf(sess)), nil
}

// EndSession ends a session and releases every grant in it.
func (s *Server) EndSession(ctx context.Context, r api.EndSessionRequestObject) (api.EndSessionResponseObject, error) {
	sess, err := s.endSession(ctx, r.Id)
	if err != nil {
		return nil, err
	}
	return api.EndSession200JSONResponse(sessionOf(sess)), nil
}

// EndSessionPost is EndSession for clients that cannot send DELETE.
func (s *Server) EndSessionPost(ctx context.Context, r api.EndSessionPostRequestObject) (api.EndSessionPostResponseObject, error) {
	sess, err := s.endSession(ctx, r.Id)
	if err != nil {
		return nil, err
	}
	return api.EndSessionPost200JSONResponse(sessionOf(sess)), nil
}

func (s *Server) endSession(ctx context.Context, id string) (lock.Session, error) {
	if err := checkSessionID("id", id); err != nil {
		return lock.Session{}, err
	}
	return s.engine.EndSession(ctx, sessionScope(callerOf(ctx)), id)
}

// HoldSession keeps a session alive while the connection stays open, and
// ends it when the connection closes.
func (s *Server) HoldSession(ctx context.Context, r api.HoldSessionRequestObject) (api.HoldSessionResponseObject, error) {
	if err := checkSessionID("id", r.Id); err != nil {
		return nil, err
	}
	releaseQuota, err := s.take(ctx, quotaHolds)
	if err != nil {
		return nil, err
	}
	select {
	case s.holds <- struct{}{}:
	default:
		releaseQuota()
		return nil, problem.Errorf(problem.ErrTooManyHolds, "this server already keeps %d hold streams open", cap(s.holds))
	}
	c := callerOf(ctx)
	scope := sessionScope(c)
	sess, err := s.engine.RenewSession(ctx, scope, r.Id, c.name)
	if err != nil {
		<-s.holds
		releaseQuota()
		return nil, err
	}
	return &sessionHold{s: s, ctx: ctx, scope: scope, id: r.Id, sess: sess, actor: c.name, releaseQuota: releaseQuota}, nil
}

// sessionHold writes a session hold's events.
type sessionHold struct {
	s            *Server
	ctx          context.Context
	scope, id    string
	sess         lock.Session
	actor        string
	releaseQuota func()
	// asked is when each grant's request to step aside was made, as the
	// stream last told it (each request is told once).
	asked map[lock.Resource]time.Time
}

// renewed sends the renewed event of sess, then a release_requested
// event for each grant of it asked to step aside since the last one.
func (h *sessionHold) renewed(out sse, sess lock.Session) error {
	if err := out.send("renewed", sessionOf(sess)); err != nil {
		return err
	}
	for r, rq := range sess.Requests {
		if h.asked[r].Equal(rq.At) {
			continue
		}
		if h.asked == nil {
			h.asked = map[lock.Resource]time.Time{}
		}
		h.asked[r] = rq.At
		hold := api.SessionHold{Kind: api.SessionHoldKind(r.Kind.String()), Key: r.Name,
			ReleaseRequested: &api.ReleaseRequested{By: rq.By, Reason: rq.Reason, At: rq.At}}
		if err := out.send("release_requested", hold); err != nil {
			return err
		}
	}
	return nil
}

// VisitHoldSessionResponse runs the stream until the client leaves (the
// session ends), the session is lost, or the server shuts down (it ends
// too). Renewals are inline: a session's renewal is one call, and a
// client too slow to read a renewal event within holdWriteTimeout is
// treated as gone.
func (h *sessionHold) VisitHoldSessionResponse(w http.ResponseWriter) error {
	defer func() {
		<-h.s.holds
		h.releaseQuota()
	}()
	out := startSSE(w)
	end := func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(h.ctx), 5*time.Second)
		defer cancel()
		_, _ = h.s.engine.EndSession(ctx, h.scope, h.id)
	}
	sendLost := func(err error) {
		p, _, _ := toAPI(err, lock.Resource{})
		_ = out.send("lost", p)
	}
	if err := h.renewed(out, h.sess); err != nil {
		end()
		return nil
	}
	tick := time.NewTicker(max(h.sess.TTL/3, 30*time.Millisecond))
	defer tick.Stop()
	heartbeat := time.NewTicker(h.s.cfg.HoldHeartbeat)
	defer heartbeat.Stop()
	for {
		var err error
		select {
		case <-h.ctx.Done():
			end()
			return nil
		case <-h.s.closing:
			end()
			sendLost(errShuttingDown)
			return nil
		case <-tick.C:
			rctx, cancel := context.WithTimeout(h.ctx, 2*time.Second)
			next, rerr := h.s.engine.RenewSession(rctx, h.scope, h.id, h.actor)
			cancel()
			switch {
			case rerr == nil:
				h.sess = next
				err = h.renewed(out, next)
			case h.ctx.Err() != nil:
				continue
			case errors.Is(rerr, lock.ErrSessionNotFound), time.Now().After(h.sess.ExpiresAt):
				sendLost(rerr)
				return nil
			}
		case <-heartbeat.C:
			err = out.write(": heartbeat\n\n")
		}
		if err != nil {
			end()
			return nil
		}
	}
}
