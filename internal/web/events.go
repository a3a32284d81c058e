package web

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/lockd/lockd/internal/lock"
)

// The dashboard's live updates: app.js opens an EventSource on eventsPath
// and, at each change, fires "lockdchange" on the body; the list and detail
// fragments re-fetch on it (liveTrigger), instead of polling every 2 s.
// Renewals are not events, so a slow poll keeps "last renewal" current.
const (
	eventsPath  = "/ui/events"
	liveTrigger = "lockdchange from:body throttle:250ms, every 10s"
	// liveHeartbeat keeps proxies from closing a quiet stream.
	liveHeartbeat = 15 * time.Second
	// maxLiveStreams caps the dashboard's open streams in this process,
	// and liveShare those of one signed-in API key: a tenth, as the API's
	// default share of its quotas, so that one key's pages leave room
	// for the others' (N7 of the second audit).
	maxLiveStreams = 200
	liveShare      = maxLiveStreams / 10
)

// eventsURL is the event stream of the keys under prefix.
func eventsURL(prefix string) string {
	if prefix == "" {
		return eventsPath
	}
	return eventsPath + "?prefix=" + url.QueryEscape(prefix)
}

// liveStreams counts a dashboard's open streams, in all and per API key.
type liveStreams struct {
	mu    sync.Mutex
	total int
	byKey map[string]int
}

// take counts one more stream of key ("": auth off, no tenants), or
// answers why not: the title and detail of a 429.
func (l *liveStreams) take(key string) (release func(), title, detail string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.total >= maxLiveStreams:
		return nil, "Too many live pages", "Reload later; the page still refreshes every 10 s."
	case key != "" && l.byKey[key] >= liveShare:
		return nil, "Too many live pages for your key", fmt.Sprintf("Key %s already has %d live pages open, its limit. "+
			"Close some; this one still refreshes every 10 s.", key, liveShare)
	}
	if l.byKey == nil {
		l.byKey = map[string]int{}
	}
	l.total++
	l.byKey[key]++
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.total--
		if l.byKey[key]--; l.byKey[key] == 0 {
			delete(l.byKey, key)
		}
	}, "", ""
}

// events streams "change" events (key and type only) of the lock keys
// under ?prefix= that the signed-in key may see; with ?kind=semaphores or
// ?kind=elections, of the semaphores or elections whose names start with
// it.
func (d *Dashboard) events(w http.ResponseWriter, r *http.Request) {
	prefix := r.URL.Query().Get("prefix")
	if !lock.ValidPrefix(prefix) {
		d.problem(w, r, http.StatusBadRequest, "Bad prefix", "A prefix is the start of a lock key.")
		return
	}
	kind := lock.KindLock
	switch r.URL.Query().Get("kind") {
	case "", "locks":
	case "semaphores":
		kind = lock.KindSemaphore
	case "elections":
		kind = lock.KindElection
	default:
		d.problem(w, r, http.StatusBadRequest, "Bad kind", "kind is locks (the default), semaphores or elections.")
		return
	}
	id := d.identify(r)
	key := "" // auth off: no tenants, only the cap
	if d.sessions != nil {
		key = id.Actor // the signed-in key's name
	}
	release, title, detail := d.live.take(key)
	if release == nil {
		d.problem(w, r, http.StatusTooManyRequests, title, detail)
		return
	}
	defer release()
	after := r.Header.Get("Last-Event-ID")
	sub, err := d.engine.Subscribe(r.Context(), after)
	if errors.Is(err, lock.ErrBadEventID) {
		sub, err = d.engine.Subscribe(r.Context(), "")
	}
	if err != nil {
		d.fail(w, r, err)
		return
	}
	defer sub.Close()
	// The lock keys, or the semaphores' or elections' names, under the
	// prefix that the identity may see.
	streamChanges(w, r, sub, func(res lock.Resource) bool {
		return res.Kind == kind && strings.HasPrefix(res.Name, prefix) && id.Key.MayTouch(res.Name)
	})
}

// streamChanges writes sub's changes of the keys that keep takes, as
// "change" events, until the browser leaves or the stream ends; a quiet
// stream gets a heartbeat every liveHeartbeat.
func streamChanges(w http.ResponseWriter, r *http.Request, sub *lock.Subscription, keep func(res lock.Resource) bool) {
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	write := func(s string) error {
		_ = rc.SetWriteDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.WriteString(w, s); err != nil {
			return err
		}
		return rc.Flush()
	}
	if write(": lockd dashboard\nretry: 2000\n\n") != nil {
		return
	}
	last := time.Now()
	for {
		wait, cancel := context.WithDeadline(r.Context(), last.Add(liveHeartbeat))
		c, err := sub.Next(wait)
		cancel()
		switch {
		case err == nil && c.Type == lock.Reset:
			// Events were missed: the page re-reads what it shows.
			if write(fmt.Sprintf("id: %s\nevent: change\ndata: {\"type\":\"reset\"}\n\n", c.ID)) != nil {
				return
			}
		case err == nil:
			if !keep(c.Resource) {
				continue
			}
			b, _ := json.Marshal(map[string]string{"kind": c.Resource.Kind.String(), "key": c.Resource.Name, "type": c.Type})
			if write(fmt.Sprintf("id: %s\nevent: change\ndata: %s\n\n", c.ID, b)) != nil {
				return
			}
		case r.Context().Err() != nil:
			return
		case errors.Is(err, context.DeadlineExceeded):
			if write(": heartbeat\n\n") != nil {
				return
			}
		case errors.Is(err, lock.ErrUnavailable):
			time.Sleep(200 * time.Millisecond)
			continue
		default:
			return // the browser reconnects with Last-Event-ID
		}
		last = time.Now()
	}
}
