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
	// maxLiveStreams caps the dashboard's open streams in this process.
	maxLiveStreams = 200
)

// eventsURL is the event stream of the keys under prefix.
func eventsURL(prefix string) string {
	if prefix == "" {
		return eventsPath
	}
	return eventsPath + "?prefix=" + url.QueryEscape(prefix)
}

// liveStreams counts open dashboard streams (one process, all dashboards).
var liveStreams = make(chan struct{}, maxLiveStreams)

// events streams "change" events (key and type only) of the lock keys
// under ?prefix= that the signed-in key may see; with ?kind=semaphores, of
// the semaphores whose names start with it.
func (d *Dashboard) events(w http.ResponseWriter, r *http.Request) {
	prefix := r.URL.Query().Get("prefix")
	if !lock.ValidPrefix(prefix) {
		d.problem(w, r, http.StatusBadRequest, "Bad prefix", "A prefix is the start of a lock key.")
		return
	}
	var sem bool
	switch r.URL.Query().Get("kind") {
	case "", "locks":
	case "semaphores":
		sem = true
	default:
		d.problem(w, r, http.StatusBadRequest, "Bad kind", "kind is locks (the default) or semaphores.")
		return
	}
	select {
	case liveStreams <- struct{}{}:
		defer func() { <-liveStreams }()
	default:
		d.problem(w, r, http.StatusTooManyRequests, "Too many live pages", "Reload later; the page still refreshes every 10 s.")
		return
	}
	id := d.identify(r)
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
			name, isSem := lock.SplitKey(c.Key)
			if isSem != sem || !strings.HasPrefix(name, prefix) || !id.MayTouch(name) {
				continue
			}
			b, _ := json.Marshal(map[string]string{"key": c.Key, "type": c.Type})
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
