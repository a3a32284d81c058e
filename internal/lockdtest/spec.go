package lockdtest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/lockd/lockd/api"
)

// The contract, loaded once for every test server of the process.
var (
	specOnce   sync.Once
	specDoc    *openapi3.T
	specRouter routers.Router
	specErr    error
)

func loadSpec() (*openapi3.T, routers.Router, error) {
	specOnce.Do(func() {
		specDoc, specErr = openapi3.NewLoader().LoadFromData(api.OpenAPI)
		if specErr != nil {
			return
		}
		if specErr = specDoc.Validate(context.Background()); specErr != nil {
			return
		}
		// Match paths on any host: test servers listen on random ports.
		specDoc.Servers = nil
		specRouter, specErr = gorillamux.NewRouter(specDoc)
		// The hold stream is checked as the list of its events, which is
		// how openapi.yaml describes it; the other two bodies are text.
		openapi3filter.RegisterBodyDecoder("text/event-stream", sseDecoder)
		openapi3filter.RegisterBodyDecoder("application/yaml", textDecoder)
	})
	return specDoc, specRouter, specErr
}

// ValidateSpec wraps h so that every exchange with a path of the contract
// is checked against api/openapi.yaml (kin-openapi's openapi3filter):
//
//   - the response's status must be declared for the operation, and its
//     headers and body must match what the document says for that status;
//   - a request the document rejects must not succeed (a 2xx means the
//     server took something the contract says it refuses);
//   - a path of the document asked with another method must answer 405
//     with an Allow header, an unknown /v1 path 404, both problem+json.
//
// Paths that are not part of the contract (the dashboard) pass through.
// Each violation is reported with report (t.Errorf in tests), so drift
// between the server and its contract fails the test that caused it.
func ValidateSpec(h http.Handler, report func(format string, args ...any)) http.Handler {
	doc, router, err := loadSpec()
	if err != nil {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			report("api/openapi.yaml does not load: %v", err)
			h.ServeHTTP(w, r)
		})
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))

		route, params, routeErr := router.FindRoute(asGET(specRequest(r, body)))
		if routeErr == nil {
			if err := decodeParams(params); err != nil {
				report("%s %s: %v", r.Method, r.URL.RequestURI(), err)
			}
		}
		rec := &recorder{ResponseWriter: w, status: http.StatusOK}
		h.ServeHTTP(rec, r)
		if rec.status == 499 || (!rec.wrote && r.Context().Err() != nil) {
			return // the client left; nobody reads an answer
		}
		name := r.Method + " " + r.URL.RequestURI()
		switch {
		case errors.Is(routeErr, routers.ErrMethodNotAllowed):
			unrouted(doc, "405", rec, name, report)
			if rec.Header().Get("Allow") == "" {
				report("%s: 405 without an Allow header", name)
			}
			return
		case routeErr != nil:
			if strings.HasPrefix(r.URL.Path, "/v1/") || rec.status == http.StatusNotFound && isProblem(rec.Header()) {
				unrouted(doc, "404", rec, name, report)
			}
			return
		}

		in := &openapi3filter.RequestValidationInput{
			Request: specRequest(r, body), PathParams: params, Route: route,
			Options: &openapi3filter.Options{
				// Auth is the server's business (and off in most tests);
				// the document only says which scope each operation needs.
				AuthenticationFunc: openapi3filter.NoopAuthenticationFunc,
				MultiError:         true,
			},
		}
		reqErr := openapi3filter.ValidateRequest(context.Background(), in)
		if reqErr != nil && rec.status < 300 {
			report("%s: answered %d to a request that api/openapi.yaml rejects: %v", name, rec.status, reqErr)
		}
		out := &openapi3filter.ResponseValidationInput{
			RequestValidationInput: in,
			Status:                 rec.status,
			Header:                 rec.Header(),
			Options:                &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
		}
		out.SetBodyBytes(rec.body.Bytes())
		if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
			report("%s: the %d answer does not match api/openapi.yaml: %v\nbody: %.600s", name, rec.status, err, rec.body.String())
		}
	})
}

// decodeParams unescapes the path parameters in place. The router matches
// the escaped path (so an encoded '/' stays inside one segment) and hands
// back the parameters as sent, order%3Apay%3A1; the contract's key pattern
// is about the key the server decodes, order:pay:1.
func decodeParams(params map[string]string) error {
	for k, v := range params {
		d, err := url.PathUnescape(v)
		if err != nil {
			return fmt.Errorf("path parameter %s %q: %w", k, v, err)
		}
		params[k] = d
	}
	return nil
}

// specRequest is r as the contract sees it. lockd takes a JSON body sent
// with curl's default form type or any +json type, and a body without a
// Content-Type (openapi.yaml says so); the document lists application/json.
func specRequest(r *http.Request, body []byte) *http.Request {
	c := r.Clone(context.Background())
	c.Body = io.NopCloser(bytes.NewReader(body))
	t := bytes.TrimSpace(body)
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	switch {
	case len(t) == 0:
		// No body: lockd ignores the Content-Type of an empty body.
		c.Body, c.ContentLength = http.NoBody, 0
		c.Header.Del("Content-Type")
	case mt == "" || strings.HasSuffix(mt, "+json") || mt == "application/x-www-form-urlencoded" && t[0] == '{':
		c.Header.Set("Content-Type", "application/json")
	}
	return c
}

// asGET routes HEAD as the GET it stands for.
func asGET(r *http.Request) *http.Request {
	if r.Method == http.MethodHead {
		r.Method = http.MethodGet
	}
	return r
}

// unrouted checks an answer to a request that no operation serves against
// the response that x-lockd-unrouted names for its status.
func unrouted(doc *openapi3.T, want string, rec *recorder, name string, report func(string, ...any)) {
	if got := fmt.Sprint(rec.status); got != want {
		report("%s: answered %s, want %s", name, got, want)
		return
	}
	if !isProblem(rec.Header()) {
		report("%s: %s is %q, not application/problem+json", name, want, rec.Header().Get("Content-Type"))
		return
	}
	schema := doc.Components.Schemas["Problem"].Value
	var v any
	if err := json.Unmarshal(rec.body.Bytes(), &v); err != nil {
		report("%s: %s body is not JSON: %v", name, want, err)
		return
	}
	if err := schema.VisitJSON(v); err != nil {
		report("%s: %s body is not a Problem: %v", name, want, err)
	}
}

func isProblem(h http.Header) bool {
	mt, _, _ := mime.ParseMediaType(h.Get("Content-Type"))
	return mt == "application/problem+json"
}

// recorder passes the answer through at once (hold streams must flow) and
// keeps a copy to check when the handler is done.
type recorder struct {
	http.ResponseWriter
	status int
	wrote  bool
	body   bytes.Buffer
}

func (r *recorder) WriteHeader(code int) {
	if !r.wrote {
		r.status, r.wrote = code, true
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(p []byte) (int, error) {
	r.wrote = true
	r.body.Write(p)
	return r.ResponseWriter.Write(p)
}

// Flush and Unwrap keep http.ResponseController (flushes, write deadlines)
// working through the recorder.
func (r *recorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// sseDecoder reads an event stream as the list of its complete events,
// [{"id": …, "event": …, "data": <the JSON of data>}] (id when the stream
// sends one), ignoring comment lines.
func sseDecoder(body io.Reader, _ http.Header, _ *openapi3.SchemaRef, _ openapi3filter.EncodingFn) (any, error) {
	events := []any{}
	ev := map[string]any{}
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if len(ev) > 0 {
				events = append(events, ev)
				ev = map[string]any{}
			}
		case strings.HasPrefix(line, ":"):
			// A comment: keep-alive.
		case strings.HasPrefix(line, "id:"):
			ev["id"] = strings.TrimSpace(strings.TrimPrefix(line, "id:"))
		case strings.HasPrefix(line, "event:"):
			ev["event"] = strings.TrimSpace(strings.TrimPrefix(line, "event:"))
		case strings.HasPrefix(line, "data:"):
			var v any
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data:")), &v); err != nil {
				return nil, fmt.Errorf("data line is not JSON: %w: %q", err, line)
			}
			ev["data"] = v
		default:
			return nil, fmt.Errorf("unexpected line in the event stream: %q", line)
		}
	}
	// An event without its closing blank line was cut off by the client
	// leaving; it is not part of what was delivered.
	return events, sc.Err()
}

func textDecoder(body io.Reader, _ http.Header, _ *openapi3.SchemaRef, _ openapi3filter.EncodingFn) (any, error) {
	b, err := io.ReadAll(body)
	return string(b), err
}
