// Package tracingtest is an in-process OTLP/HTTP receiver for tests: it
// decodes the protobuf ExportTraceServiceRequests that lockd sends and
// keeps their spans and raw payloads.
package tracingtest

import (
	"cmp"
	"compress/gzip"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Path is where the receiver takes spans: OTLP/HTTP's traces path.
const Path = "/v1/traces"

// Receiver is an OTLP/HTTP traces endpoint.
type Receiver struct {
	// URL is the receiver's base URL (http://127.0.0.1:port), the form
	// an operator gives --otlp-endpoint; spans are taken at URL+Path.
	URL string

	mu       sync.Mutex
	payloads [][]byte // each request's body, decompressed
	requests []*coltracepb.ExportTraceServiceRequest
	spans    []Span
}

// Span is one exported span and the attributes of its resource.
type Span struct {
	*tracepb.Span
	Resource map[string]string
}

// Start runs a receiver until the test ends.
func Start(tb testing.TB) *Receiver {
	tb.Helper()
	r := &Receiver{}
	srv := httptest.NewServer(http.HandlerFunc(r.serve))
	tb.Cleanup(srv.Close)
	r.URL = srv.URL
	return r
}

func (r *Receiver) serve(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost || req.URL.Path != Path {
		http.Error(w, "not an OTLP traces endpoint: "+req.Method+" "+req.URL.Path, http.StatusNotFound)
		return
	}
	if ct := req.Header.Get("Content-Type"); ct != "application/x-protobuf" {
		http.Error(w, "want protobuf, got "+ct, http.StatusUnsupportedMediaType)
		return
	}
	var body io.Reader = req.Body
	if req.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = zr
	}
	raw, err := io.ReadAll(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var msg coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(raw, &msg); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	r.payloads = append(r.payloads, raw)
	r.requests = append(r.requests, &msg)
	for _, rs := range msg.ResourceSpans {
		res := map[string]string{}
		for _, kv := range rs.GetResource().GetAttributes() {
			res[kv.Key] = valueString(kv.Value)
		}
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				r.spans = append(r.spans, Span{Span: s, Resource: res})
			}
		}
	}
	r.mu.Unlock()
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

// Spans are the spans received so far.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.spans...)
}

// Payloads are the raw (decompressed) protobuf bodies received so far.
func (r *Receiver) Payloads() [][]byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([][]byte(nil), r.payloads...)
}

// Strings is every string in every payload received: span names,
// attribute keys and values, events, links, status messages, resources,
// trace states, scopes. A test looks for secrets among them.
func (r *Receiver) Strings() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, m := range r.requests {
		out = appendStrings(out, m.ProtoReflect())
	}
	return out
}

// appendStrings walks every field of m, however deep.
func appendStrings(out []string, m protoreflect.Message) []string {
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList():
			l := v.List()
			for i := range l.Len() {
				out = appendValue(out, fd, l.Get(i))
			}
		case fd.IsMap():
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				out = append(out, k.String())
				out = appendValue(out, fd.MapValue(), mv)
				return true
			})
		default:
			out = appendValue(out, fd, v)
		}
		return true
	})
	return out
}

func appendValue(out []string, fd protoreflect.FieldDescriptor, v protoreflect.Value) []string {
	switch fd.Kind() {
	case protoreflect.StringKind:
		return append(out, v.String())
	case protoreflect.BytesKind:
		return append(out, string(v.Bytes()))
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return appendStrings(out, v.Message())
	}
	return out
}

// WaitFor polls until ok holds for the spans received, or fails the test
// after d.
func (r *Receiver) WaitFor(tb testing.TB, d time.Duration, what string, ok func([]Span) bool) []Span {
	tb.Helper()
	deadline := time.Now().Add(d)
	for {
		spans := r.Spans()
		if ok(spans) {
			return spans
		}
		if time.Now().After(deadline) {
			tb.Fatalf("no %s among %d spans received in %v:\n%s", what, len(spans), d, Dump(spans))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TraceID is the span's trace id in hex, as traceparent has it.
func (s Span) TraceID() string { return hex.EncodeToString(s.Span.TraceId) }

// SpanID is the span's id in hex.
func (s Span) SpanID() string { return hex.EncodeToString(s.Span.SpanId) }

// ParentID is the span's parent's id in hex; "" for a root.
func (s Span) ParentID() string { return hex.EncodeToString(s.ParentSpanId) }

// Attr is the value of attribute key as a string, and whether it is set.
func (s Span) Attr(key string) (string, bool) {
	for _, kv := range s.Attributes {
		if kv.Key == key {
			return valueString(kv.Value), true
		}
	}
	return "", false
}

// AttrKeys are the span's attribute keys.
func (s Span) AttrKeys() []string {
	keys := make([]string, len(s.Attributes))
	for i, kv := range s.Attributes {
		keys[i] = kv.Key
	}
	return keys
}

func valueString(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return strconv.FormatInt(x.IntValue, 10)
	case *commonpb.AnyValue_BoolValue:
		return strconv.FormatBool(x.BoolValue)
	case *commonpb.AnyValue_DoubleValue:
		return strconv.FormatFloat(x.DoubleValue, 'g', -1, 64)
	case *commonpb.AnyValue_ArrayValue:
		var parts []string
		for _, e := range x.ArrayValue.GetValues() {
			parts = append(parts, valueString(e))
		}
		return "[" + strings.Join(parts, " ") + "]"
	}
	return fmt.Sprint(v)
}

// Dump is the spans as a tree-less list, one a line, for failure messages.
func Dump(spans []Span) string {
	var b strings.Builder
	for _, s := range spans {
		fmt.Fprintf(&b, "  %s trace=%s span=%s parent=%s kind=%v attrs=", s.Name, s.TraceID(), s.SpanID(), s.ParentID(), s.Kind)
		for _, kv := range s.Attributes {
			fmt.Fprintf(&b, "%s=%s ", kv.Key, valueString(kv.Value))
		}
		b.WriteString("\n")
	}
	return b.String()
}

// Tree is the spans of one trace as an indented tree under their parents,
// for failure messages and docs.
func Tree(spans []Span, traceID string) string {
	spans = slices.Clone(spans)
	slices.SortFunc(spans, func(a, b Span) int { return cmp.Compare(a.StartTimeUnixNano, b.StartTimeUnixNano) })
	children := map[string][]Span{}
	ids := map[string]bool{}
	for _, s := range spans {
		if s.TraceID() == traceID {
			ids[s.SpanID()] = true
		}
	}
	var roots []Span
	for _, s := range spans {
		if s.TraceID() != traceID {
			continue
		}
		if ids[s.ParentID()] {
			children[s.ParentID()] = append(children[s.ParentID()], s)
		} else {
			roots = append(roots, s)
		}
	}
	var b strings.Builder
	var walk func(s Span, depth int)
	walk = func(s Span, depth int) {
		fmt.Fprintf(&b, "%s%s (%.1f ms)", strings.Repeat("  ", depth), s.Name, float64(s.EndTimeUnixNano-s.StartTimeUnixNano)/1e6)
		for _, kv := range s.Attributes {
			fmt.Fprintf(&b, " %s=%s", kv.Key, valueString(kv.Value))
		}
		b.WriteString("\n")
		for _, c := range children[s.SpanID()] {
			walk(c, depth+1)
		}
	}
	for _, r := range roots {
		walk(r, 0)
	}
	return b.String()
}
