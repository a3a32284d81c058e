package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	fastjson "github.com/segmentio/encoding/json"
	"io"
	"math"
	"mime"
	"net/http"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/go-chi/chi/v5"

	"github.com/lockd/lockd/api"
	"github.com/lockd/lockd/internal/lock"
	"github.com/lockd/lockd/internal/problem"
)

// MaxBody is the largest request body accepted.
const MaxBody = 64 << 10

// resourceParam is the resource the request's {key} names if it is a
// valid key: its kind is the operation's x-lockd-kind. Problems and access
// logs take it, so that they tell a lock and a semaphore apart. It is the
// zero Resource when the route names none.
func resourceParam(r *http.Request) lock.Resource {
	k, ok := routeKey(r)
	if !ok || !lock.ValidKey(k) {
		return lock.Resource{}
	}
	op, _ := operationOf(r)
	return lock.Resource{Kind: kindOf(op), Name: k}
}

// kindOf is the kind of resource an operation works on (x-lockd-kind).
func kindOf(op api.Operation) lock.Kind {
	switch op.Kind {
	case "lock":
		return lock.KindLock
	case "semaphore":
		return lock.KindSemaphore
	case "election":
		return lock.KindElection
	default:
		return 0
	}
}

// operationOf is the contract's operation for the route that r matched
// (its chi pattern), which carries the operation's policy. HEAD is served
// as GET.
func operationOf(r *http.Request) (api.Operation, bool) {
	rctx := chi.RouteContext(r.Context())
	if rctx == nil {
		return api.Operation{}, false
	}
	m := r.Method
	if m == http.MethodHead {
		m = http.MethodGet
	}
	return api.OperationFor(m, rctx.RoutePattern())
}

// checkRequest checks what every operation shares before the generated
// code binds it: the lock key, the caller's right to it, and for bodies
// their size, media type and shape (one JSON object, no unknown fields, no
// trailing data).
func (s *Server) checkRequest(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if k, ok := routeKey(r); ok && !lock.ValidKey(k) {
			writeError(w, r, invalid("key", "key must be 1-200 characters of A-Z a-z 0-9 . _ : @ -, starting with a letter or digit"))
			return
		}
		if err := s.authorize(r); err != nil {
			writeError(w, r, err)
			return
		}
		if r.Method == http.MethodPost {
			if err := checkBody(w, r); err != nil {
				writeError(w, r, err)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

func routeKey(r *http.Request) (string, bool) {
	rctx := chi.RouteContext(r.Context())
	if rctx == nil {
		return "", false
	}
	for i, k := range rctx.URLParams.Keys {
		if k == "key" {
			// chi routes on the escaped path (RawPath) when the client
			// escaped more than it must, as clients that encode every ':'
			// do (order%3Apay%3A1), and on the decoded Path otherwise. The
			// generated code binds the key unescaped by the same rule
			// (ValueIsUnescaped: RawPath == ""), so the checks here see the
			// very key it binds: unescaping a decoded Path again would
			// turn a literal "a%3Ab" (sent as a%253Ab, no key) into the
			// key a:b. An escape that does not decode is left as is: it is
			// no key.
			v := rctx.URLParams.Values[i]
			if r.URL.RawPath != "" {
				if u, err := url.PathUnescape(v); err == nil {
					v = u
				}
			}
			return v, true
		}
	}
	return "", false
}

// checkQuery answers 400 naming the parameter when the query string does
// not parse: a bad percent escape or a ';' separator. r.URL.Query(), which
// the generated code and the dashboard bind from, drops such a pair
// without a word, so "?prefix=%zz" would list everything and "?cursor=%%"
// restart from the first page. It runs before routing, on the API and the
// dashboard alike; the probes, /metrics and /openapi.yaml (the contract's
// paths outside /v1/) read no query, and a liveness probe must answer
// whatever its URL carries.
func checkQuery(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.RawQuery == "" {
			next.ServeHTTP(w, r)
			return
		}
		if op, ok := api.OperationFor(http.MethodGet, r.URL.Path); ok && !strings.HasPrefix(op.Path, "/v1/") {
			next.ServeHTTP(w, r)
			return
		}
		if err := queryError(r.URL.RawQuery); err != nil {
			writeError(w, r, err)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// queryError is the first pair of the raw query that url.ParseQuery would
// refuse, as a 400 naming its parameter (as sent, when the name itself does
// not decode).
func queryError(raw string) error {
	for raw != "" {
		var pair string
		pair, raw, _ = strings.Cut(raw, "&")
		name, value, _ := strings.Cut(pair, "=")
		field, err := url.QueryUnescape(name)
		if err != nil {
			field = name
		}
		if len(field) > 64 {
			field = field[:64] + "…"
		}
		field = strings.ToValidUTF8(field, "?")
		if err != nil {
			return invalid(field, "the query parameter %q has a bad percent escape in its name", field)
		}
		if strings.Contains(pair, ";") {
			return invalid(field, "the query parameter %s contains ';': separate parameters with '&', and escape a ';' in a value as %%3B", field)
		}
		if _, err := url.QueryUnescape(value); err != nil {
			return invalid(field, "the query parameter %s has a bad percent escape: write %% as %%25", field)
		}
	}
	return nil
}

// checkBody validates a POST's body before the generated code binds it:
// its size, media type and shape. It reads the body and puts back what the
// generated code is to bind (for JSON null, {}); it decides nothing else.
func checkBody(w http.ResponseWriter, r *http.Request) error {
	b, err := readBody(w, r)
	if err != nil {
		return err
	}
	ct := r.Header.Get("Content-Type")
	mt, isJSON := "application/json", true
	if ct != mt {
		// ParseMediaType allocates a map for the parameters: only for
		// the types that are not plainly JSON.
		var ctErr error
		mt, _, ctErr = mime.ParseMediaType(ct)
		isJSON = ctErr == nil && (mt == "application/json" || strings.HasSuffix(mt, "+json"))
	}
	if fromBrowser(r) && !isJSON {
		// A cross-site page can send text/plain or a form, even an empty
		// one, without a CORS preflight, but not application/json: from a
		// browser, only JSON is taken (spec: browser safety).
		return problem.Errorf(problem.ErrMediaType, "a request from a browser must send Content-Type: application/json, not %q", ct)
	}
	if len(bytes.TrimSpace(b)) == 0 {
		r.Body = http.NoBody
		checked(r, nil)
		return nil
	}
	if ct != "" {
		// curl -d labels every body as a form; take it when it is JSON.
		curlDefault := mt == "application/x-www-form-urlencoded" && bytes.TrimSpace(b)[0] == '{'
		if !isJSON && !curlDefault {
			return problem.Errorf(problem.ErrMediaType, "the body must be JSON (Content-Type: application/json), not %q", ct)
		}
	}
	if bytes.Equal(bytes.TrimSpace(b), []byte("null")) {
		// JSON null is "no body" to many clients' serialisers (a nil
		// struct pointer): it means the same as {}.
		b = []byte("{}")
	}
	// The generated code binds the body as it was built to; this decode
	// into the same type only validates it (unknown fields, types, one
	// object), so that a 400 names the field at fault.
	body := &bodyReader{}
	body.Reset(b)
	r.Body = body
	op, _ := operationOf(r)
	if v := api.NewRequestBody(op.ID); v != nil {
		if err := decodeStrict(b, v); err != nil {
			return err
		}
		if err := noNullValue(b); err != nil {
			return err
		}
		checked(r, v)
	}
	return nil
}

// readBody reads r's body whole, up to MaxBody: into a slice of its
// Content-Length when the client gave one (as every client here does),
// else through http.MaxBytesReader.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	// A length of 0 is no body only when the body says so: a request made
	// in process (not read off the wire) may have a body of unknown length.
	if n := r.ContentLength; n > 0 && n <= MaxBody || n == 0 && (r.Body == nil || r.Body == http.NoBody) {
		if n == 0 {
			return nil, nil
		}
		b := make([]byte, n)
		if _, err := io.ReadFull(r.Body, b); err != nil {
			return nil, invalid("body", "could not read the body: %v", err)
		}
		return b, nil
	}
	if r.ContentLength > MaxBody {
		return nil, problem.Errorf(problem.ErrTooLarge, "the body is over %d bytes", MaxBody)
	}
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return nil, problem.Errorf(problem.ErrTooLarge, "the body is over %d bytes", MaxBody)
		}
		return nil, invalid("body", "could not read the body: %v", err)
	}
	return b, nil
}

// bodyReader is the body checkBody read, read again by the generated code
// when it binds the body itself: a bytes.Reader that closes.
type bodyReader struct{ bytes.Reader }

func (*bodyReader) Close() error { return nil }

// checked keeps body, decoded by checkBody, for leaseOps: one decode
// instead of two.
func checked(r *http.Request, body any) {
	if x := exchangeOf(r.Context()); x != nil {
		x.body, x.bodyChecked = body, true
	}
}

// noNullValue refuses "value": null, which the decoder would take for an
// absent value: the contract has no null value, only none (leave it out).
// Only a body that mentions "value" is parsed again.
func noNullValue(b []byte) error {
	if !bytes.Contains(b, []byte(`"value"`)) {
		return nil
	}
	var fields map[string]json.RawMessage
	if json.Unmarshal(b, &fields) == nil && string(bytes.TrimSpace(fields["value"])) == "null" {
		return invalid("value", "value must not be null: leave it out for none")
	}
	return nil
}

// decodeStrict decodes one JSON object into v, naming the field at fault.
// segmentio/encoding's json decodes the bodies that are right, twice as
// fast as encoding/json and with a third of its allocations (every lease
// operation's body goes through here); any other is decoded again by
// encoding/json, whose errors say what a 400 names (stdStrict), so a
// refusal reads as it always has. TestDecodeStrictAsEncodingJSON and
// FuzzDecodeStrict hold the two to the same answers.
func decodeStrict(b []byte, v any) error {
	if t := bytes.TrimSpace(b); t[0] != '{' {
		return invalid("body", "the body must be a JSON object")
	}
	if !utf8.Valid(b) {
		// encoding/json would turn the bad bytes into U+FFFD silently.
		return invalidUTF8(b)
	}
	if shallow(b) {
		rest, err := fastjson.Parse(b, v, fastjson.DisallowUnknownFields)
		if err == nil && len(bytes.TrimSpace(rest)) == 0 {
			return nil
		}
		reflect.ValueOf(v).Elem().SetZero()
	}
	return stdStrict(b, v)
}

// shallow reports whether b's arrays and objects nest at most 32 deep.
// Deeper bodies go to encoding/json alone: it refuses nesting past 10,000,
// which segmentio's decoder takes.
func shallow(b []byte) bool {
	depth, inString := 0, false
	for i := 0; i < len(b); i++ {
		switch c := b[i]; {
		case inString && c == '\\':
			i++
		case c == '"':
			inString = !inString
		case inString:
		case c == '[' || c == '{':
			if depth++; depth > 32 {
				return false
			}
		case c == ']' || c == '}':
			depth--
		}
	}
	return true
}

// stdStrict is decodeStrict with encoding/json alone.
func stdStrict(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err)
	}
	if len(bytes.TrimSpace(b[dec.InputOffset():])) != 0 {
		return invalid("body", "the body must hold one JSON object and nothing after it")
	}
	return nil
}

func jsonError(err error) error {
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syntax):
		return invalid("body", "malformed JSON at byte %d: %v", syntax.Offset, err)
	case errors.As(err, &typ):
		if typ.Field == "" {
			return invalid("body", "the body must be a JSON object")
		}
		return invalid(typ.Field, "%s must be %s, not %s", typ.Field, jsonKind(typ.Type.Kind().String()), typ.Value)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return invalid("body", "the JSON body ends too soon")
	}
	if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		f = strings.Trim(f, `"`)
		return invalid(f, "unknown field %q", f)
	}
	return invalid("body", "malformed JSON: %v", err)
}

func jsonKind(k string) string {
	switch {
	case strings.HasPrefix(k, "int"):
		return "an integer"
	case k == "string":
		return "a string"
	case k == "bool":
		return "true or false"
	default:
		return "a " + k
	}
}

// paramError answers the generated code's parameter binding errors.
func paramError(w http.ResponseWriter, r *http.Request, err error) {
	var (
		format  *api.InvalidParamFormatError
		req     *api.RequiredParamError
		header  *api.RequiredHeaderError
		many    *api.TooManyValuesForParamError
		unmarsh *api.UnmarshalingParamError
	)
	switch {
	case errors.As(err, &format):
		err = invalid(format.ParamName, "%s has the wrong format: %v", format.ParamName, format.Err)
	case errors.As(err, &req):
		err = invalid(req.ParamName, "%s is required", req.ParamName)
	case errors.As(err, &header):
		err = invalid(header.ParamName, "header %s is required", header.ParamName)
	case errors.As(err, &many):
		err = invalid(many.ParamName, "%s is given %d times; give it once", many.ParamName, many.Count)
	case errors.As(err, &unmarsh):
		err = invalid(unmarsh.ParamName, "%s has the wrong format: %v", unmarsh.ParamName, unmarsh.Err)
	default:
		err = invalid("request", "%v", err)
	}
	writeError(w, r, err)
}

// requestError answers a body that the generated code could not bind.
func requestError(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, io.EOF) {
		writeError(w, r, missingBody(r))
		return
	}
	writeError(w, r, jsonError(errors.Unwrap(err)))
}

// missingBody answers an operation whose required body was not sent,
// naming what the body needs.
func missingBody(r *http.Request) error {
	switch op, _ := operationOf(r); op.ID {
	case "acquireSemaphore", "holdSemaphore":
		return checkSemaphoreLimitErr(0)
	}
	return invalid("body", "a JSON body is required, e.g. {\"token\": \"…\"}")
}

// checkSemaphoreLimit validates a semaphore's limit: required, 1 …
// lock.MaxLimit.
func checkSemaphoreLimit(v *int) (int, error) {
	n := 0
	if v != nil {
		n = *v
	}
	if n < 1 || n > lock.MaxLimit {
		return 0, checkSemaphoreLimitErr(n)
	}
	return n, nil
}

func checkSemaphoreLimitErr(n int) error {
	if n == 0 {
		// The generated body cannot tell a missing limit from 0.
		return invalid("limit", "limit is required: the most permits held at once, between 1 and %d", lock.MaxLimit)
	}
	return invalid("limit", "limit must be between 1 and %d, got %d", lock.MaxLimit, n)
}

// msRange reads an optional millisecond field, checked against [lo, hi].
func msRange(field string, v *int64, def, lo, hi time.Duration) (time.Duration, error) {
	if v == nil {
		return def, nil
	}
	d := time.Duration(*v) * time.Millisecond
	if *v < lo.Milliseconds() || *v > hi.Milliseconds() {
		// The durations beside the numbers: a person who typed --ttl 100h
		// reads "got 360000000 (100h0m0s)", not a count of milliseconds alone.
		e := problem.Invalid(field, "%s must be between %d and %d (%s and %s), got %d (%s)", field,
			lo.Milliseconds(), hi.Milliseconds(), msText(lo.Milliseconds()), msText(hi.Milliseconds()), *v, msText(*v))
		if *v > hi.Milliseconds() {
			e.Max = hi
		}
		return 0, e
	}
	return d, nil
}

// msText is n milliseconds as a duration, or as milliseconds where a
// duration would overflow or mean nothing (below 0).
func msText(n int64) string {
	if n < 0 || n > math.MaxInt64/int64(time.Millisecond) {
		return fmt.Sprintf("%d ms", n)
	}
	return (time.Duration(n) * time.Millisecond).String()
}

// checkOwner validates an owner label: 1–128 printable characters.
func checkOwner(s string) error {
	if s == "" || len([]rune(s)) > 128 {
		return invalid("owner", "owner must be 1-128 printable characters, got %d", len([]rune(s)))
	}
	for _, c := range s {
		if !unicode.IsPrint(c) {
			return invalid("owner", "owner must be printable; it has %U", c)
		}
	}
	return nil
}

// checkToken validates the shape of a lease token; whether it is the live
// one is the engine's answer.
func checkToken(s string, required bool) error {
	if s == "" {
		if required {
			return invalid("token", "token is required: the token that acquire returned")
		}
		return nil
	}
	if len(s) > 256 {
		return invalid("token", "token must be at most 256 characters")
	}
	return nil
}

// checkProof validates the shape of an optional proof: a bound on its
// length. Whether it proves anything is the engine's to say, and only
// when Redis no longer has the lease: a proof that does not verify
// changes no answer.
func checkProof(s *string) (string, error) {
	if s == nil {
		return "", nil
	}
	if len(*s) > maxProof {
		return "", invalid("proof", "proof must be at most %d characters: send back the proof a grant or renewal answered, as it came", maxProof)
	}
	return *s, nil
}

// maxProof is the longest proof accepted (api/openapi.yaml): lockd's are
// at most 300 characters.
const maxProof = 512

// checkText validates free text such as a reason or an idempotency key.
// The rule is lock.CheckText, shared with the dashboard.
func checkText(field, s string, maxLen int) error {
	if err := lock.CheckText(s, maxLen); err != nil {
		return invalid(field, "%s %v", field, err)
	}
	return nil
}

// checkLimit validates an optional page size.
func checkLimit(v *int, def int) (int, error) {
	if v == nil {
		return def, nil
	}
	if *v < 1 || *v > 1000 {
		return 0, invalid("limit", "limit must be between 1 and 1000, got %d", *v)
	}
	return *v, nil
}

func checkPrefix(v *string) (string, error) {
	if v == nil {
		return "", nil
	}
	if !lock.ValidPrefix(*v) {
		return "", invalid("prefix", "prefix must be at most 200 characters of A-Z a-z 0-9 . _ : @ -")
	}
	return *v, nil
}

// invalidUTF8 names the field of the JSON object b whose value is not
// valid UTF-8 (or "body" when a name is, or the object does not parse).
func invalidUTF8(b []byte) error {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(b, &fields); err == nil {
		for name, raw := range fields {
			if !utf8.Valid(raw) && utf8.ValidString(name) {
				return invalid(name, "%s must be valid UTF-8", name)
			}
		}
	}
	return invalid("body", "the body must be valid UTF-8")
}

// maxValueDepth is the most levels of nesting a value may have: deep
// enough for any description of a holder, shallow enough that no reader
// (the dashboard, a client's decoder) recurses far on it.
const maxValueDepth = 32

// checkValue validates a grant's value and returns it as compact JSON, ""
// when absent. The body decoder has parsed it already, so it is valid
// JSON.
func checkValue(v *api.Value) (string, error) {
	if v == nil {
		return "", nil
	}
	var b bytes.Buffer
	if err := json.Compact(&b, *v); err != nil {
		return "", invalid("value", "value must be JSON: %v", err)
	}
	if b.String() == "null" {
		return "", invalid("value", "value must not be null: leave it out for none")
	}
	if b.Len() > lock.MaxValue {
		return "", invalid("value", "value must be at most %d bytes of compact JSON, got %d", lock.MaxValue, b.Len())
	}
	if d := jsonDepth(b.Bytes()); d > maxValueDepth {
		return "", invalid("value", "value must nest at most %d levels deep, got %d", maxValueDepth, d)
	}
	if err := portableJSON(b.Bytes()); err != nil {
		return "", invalid("value", "value %v", err)
	}
	return b.String(), nil
}

// portableJSON refuses, in valid JSON, what common decoders cannot read
// back: a number beyond a float64's range (1e999, a 400-digit integer),
// which JavaScript and Python read as Infinity, and a \u escape of half a
// surrogate pair, which is no character (JavaScript keeps a broken
// string, Python one it cannot encode, Go a U+FFFD). A number below a
// float64's smallest reads as 0 everywhere, and a long one loses digits
// the same way everywhere: both are accepted.
func portableJSON(b []byte) error {
	for i := 0; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			end, err := stringEnd(b, i+1)
			if err != nil {
				return err
			}
			i = end
		case c == '-' || '0' <= c && c <= '9':
			end := i + 1
			for end < len(b) && strings.IndexByte("0123456789+-.eE", b[end]) >= 0 {
				end++
			}
			if _, err := strconv.ParseFloat(string(b[i:end]), 64); err != nil {
				return errors.New("must not hold a number beyond a float64's ±1.8e308, which JSON decoders read as Infinity (send a larger one as a string)")
			}
			i = end - 1
		}
	}
	return nil
}

// stringEnd is the index of the quote that closes the JSON string starting
// at b[i], or an error for a \u escape of an unpaired surrogate.
func stringEnd(b []byte, i int) (int, error) {
	for ; i < len(b); i++ {
		switch b[i] {
		case '"':
			return i, nil
		case '\\':
			if b[i+1] != 'u' {
				i++
				continue
			}
			r := hexRune(b[i+2 : i+6])
			i += 5
			switch {
			case utf16.IsSurrogate(r) && r < 0xdc00 && i+6 < len(b) && b[i+1] == '\\' && b[i+2] == 'u':
				if lo := hexRune(b[i+3 : i+7]); 0xdc00 <= lo && lo <= 0xdfff {
					i += 6
					continue
				}
				fallthrough
			case utf16.IsSurrogate(r):
				return 0, fmt.Errorf("must not hold \\u%04x, half of a UTF-16 surrogate pair: it is no character", r)
			}
		}
	}
	return len(b), nil
}

// hexRune is the code unit of a \u escape's four hex digits.
func hexRune(h []byte) rune {
	n, _ := strconv.ParseUint(string(h), 16, 32)
	return rune(n)
}

// jsonDepth is the deepest nesting of objects and arrays in valid JSON.
func jsonDepth(b []byte) int {
	depth, deepest, inString, escaped := 0, 0, false, false
	for _, c := range b {
		switch {
		case escaped:
			escaped = false
		case inString && c == '\\':
			escaped = true
		case c == '"':
			inString = !inString
		case inString:
		case c == '{' || c == '[':
			depth++
			deepest = max(deepest, depth)
		case c == '}' || c == ']':
			depth--
		}
	}
	return deepest
}
