package mcp

import (
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"net/http"
)

// origin is where an MCP session over HTTP came from: the address, Host
// and TLS state of the request that began it. The API requests its tools
// make carry them, so that lockd sees the agent's address (the actor when
// auth is off, the limit on unknown keys) and checks its Host as it
// checked the agent's own requests.
type origin struct {
	remoteAddr string
	host       string
	tls        *tls.ConnectionState
}

type originKey struct{}

// originOf is the origin that the MCP endpoint put into a request's
// context; the SDK keeps the values of the request that began a session
// in the context of every tool call of that session.
func originOf(ctx context.Context) origin {
	o, _ := ctx.Value(originKey{}).(origin)
	return o
}

// loopback is an http.RoundTripper that serves each request with an
// http.Handler in this process, lockd's own router: the tools of the MCP
// endpoint go through exactly the API's middleware (auth, scopes,
// prefixes, quotas, validation, metrics, access log), without a socket.
// It answers when the handler returns, so it suits the API's
// request-response operations (a wait included), not its streams.
type loopback struct {
	api    http.Handler
	origin origin
}

func (l loopback) RoundTrip(req *http.Request) (*http.Response, error) {
	// The handler sees a server request built afresh: none of the client
	// request's context values (the tool call's context carries those of
	// the MCP request, a chi route among them), but its cancellation.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stop := context.AfterFunc(req.Context(), cancel)
	defer stop()

	in := req.Clone(ctx)
	in.RequestURI = req.URL.RequestURI()
	in.Host = l.origin.host
	if in.Host == "" {
		in.Host = "localhost"
	}
	in.RemoteAddr = l.origin.remoteAddr
	if in.RemoteAddr == "" {
		in.RemoteAddr = "127.0.0.1:0"
	}
	in.TLS = l.origin.tls
	in.Proto, in.ProtoMajor, in.ProtoMinor = "HTTP/1.1", 1, 1
	if in.Body == nil {
		in.Body = http.NoBody
	}
	rec := &recorder{header: http.Header{}}
	l.api.ServeHTTP(rec, in)
	if err := req.Context().Err(); err != nil {
		return nil, err
	}
	if rec.status == 0 {
		rec.status = http.StatusOK
	}
	return &http.Response{
		Status: http.StatusText(rec.status), StatusCode: rec.status,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: rec.header, Body: io.NopCloser(bytes.NewReader(rec.body.Bytes())),
		ContentLength: int64(rec.body.Len()), Request: req,
	}, nil
}

// recorder keeps one answer of the handler.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
}

func (r *recorder) Write(p []byte) (int, error) {
	r.WriteHeader(http.StatusOK)
	return r.body.Write(p)
}

// Flush is a no-op: the answer is read when the handler returns.
func (r *recorder) Flush() {}
