package server

import (
	"context"
	"net/http"

	"github.com/rs/zerolog"
)

// fields adds to ev what every log line of the request carries, in the
// order the lines have always had them: req_id, trace_id, then the owner
// and holder when the handler named them.
func (x *exchange) fields(ev *zerolog.Event) *zerolog.Event {
	ev = ev.Str("req_id", x.reqID[0]).Str("trace_id", x.traceID)
	if x.owner != "" {
		ev = ev.Str("owner", x.owner)
	}
	if x.holder != "" {
		ev = ev.Str("holder", x.holder)
	}
	return ev
}

// requestLog is the logger of the request ctx serves: the server's, with
// the request's id and trace id (and the owner, once known). It is made
// on the first line a handler writes, not on every request: most write
// none before the access log. Outside a request it is a logger that
// writes nothing.
func requestLog(ctx context.Context) *zerolog.Logger {
	x := exchangeOf(ctx)
	if x == nil || x.base == nil {
		return zerolog.Ctx(ctx)
	}
	if x.log == nil {
		c := x.base.With().Str("req_id", x.reqID[0]).Str("trace_id", x.traceID)
		if x.owner != "" {
			c = c.Str("owner", x.owner)
		}
		l := c.Logger()
		x.log = &l
	}
	return x.log
}

// RequestLog is requestLog for the dashboard's pages, which lockd's
// middleware serves too.
func RequestLog(r *http.Request) *zerolog.Logger { return requestLog(r.Context()) }

// statusWriter is the response writer the handlers see: it records the
// status and the bytes written for the access log and the metrics.
// Flush and Unwrap keep streams (server-sent events) and
// http.ResponseController working through it.
type statusWriter struct {
	http.ResponseWriter
	status, size int
}

func (w *statusWriter) WriteHeader(code int) {
	switch {
	case code >= 100 && code < 200 && code != http.StatusSwitchingProtocols:
		// An informational answer; the real one follows.
		w.ResponseWriter.WriteHeader(code)
	case w.status == 0:
		// Only the first: net/http logs a second as superfluous.
		w.status = code
		w.ResponseWriter.WriteHeader(code)
	}
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	n, err := w.ResponseWriter.Write(b)
	w.size += n
	return n, err
}

func (w *statusWriter) Flush() {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
