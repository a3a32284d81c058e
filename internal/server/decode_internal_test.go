package server

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/lockd/lockd/api"
	"github.com/lockd/lockd/internal/problem"
)

// decodeBodies are bodies right and wrong in every way a client gets
// them wrong; the seeds of FuzzDecodeStrict.
var decodeBodies = []string{
	`{}`, `{"ttl_ms":30000}`, `{"ttl_ms":30000,"wait_ms":0,"owner":"w"}`, `{"TTL_MS":5}`, `{"Ttl_Ms":5}`,
	`{"ttl_ms":"5"}`, `{"ttl_ms":5.5}`, `{"ttl_ms":1e3}`, `{"ttl_ms":-1}`, `{"ttl_ms":99999999999999999999}`,
	`{"ttl_ms":null}`, `{"owner":null}`, `{"owner":5}`, `{"owner":"a\u0000b"}`, `{"owner":"\ud800"}`,
	`{"nope":1}`, `{"owner":"w","nope":{"a":[1,2]}}`, `{"ttl_ms":1,"ttl_ms":2}`, `{"mode":"shared"}`,
	`{"mode":7}`, `{"value":{"a":1}}`, `{"value":[1,"x",null]}`, `{"value":"s"}`, `{"value":nul}`,
	`{"token":"t","proof":"p"}`, `{"token":["t"]}`, `{"keys":["a","b"],"ttl_ms":1000}`, `{"keys":"a"}`,
	`{"keys":[1]}`, `{"ttl_ms":1} `, `{"ttl_ms":1} {}`, `{"ttl_ms":1}x`, `{"ttl_ms":}`, `{"ttl_ms"`, `{`,
	`{"a":1,}`, `{"owner":"w",}`, `{'owner':'w'}`, `{"limit":3,"owner":"w"}`, `{"limit":true}`,
	`{"reason":"` + strings.Repeat("r", 500) + `"}`, `{"session":"s1","ttl_ms":1}`, `{"lock_delay_ms":5}`,
	`{"min_hold_ms":5}`, `{"wait_ms":-5}`, `{"owner":"\u00e9\ud83d\udd12"}`, `{"owner":"tab\there"}`,
	`  {"ttl_ms" : 5 }  `, "{\n\"ttl_ms\":5\n}", `{"release_requested":true}`, `{"to":"x"}`,
	`{"value":` + strings.Repeat("[", 10001) + strings.Repeat("]", 10001) + `}`,
	`{"value":` + strings.Repeat(`{"a":`, 10001) + "1" + strings.Repeat("}", 10001) + `}`,
	`{"value":` + strings.Repeat("[", 40) + strings.Repeat("]", 40) + `}`,
	`{"owner":"[[[[\"{{{{","value":[[1]]}`,
}

// oldStrict is decodeStrict as it was, with encoding/json alone: the
// reference.
func oldStrict(b []byte, v any) error {
	if t := bytes.TrimSpace(b); t[0] != '{' {
		return invalid("body", "the body must be a JSON object")
	}
	if !utf8.Valid(b) {
		return invalidUTF8(b)
	}
	return stdStrict(b, v)
}

// decodeStrict takes and refuses what encoding/json did, into every
// operation's body type, and names the same field when it refuses.
func TestDecodeStrictAsEncodingJSON(t *testing.T) {
	ids := map[string]bool{}
	for _, op := range api.Operations() {
		if api.NewRequestBody(op.ID) != nil {
			ids[op.ID] = true
		}
	}
	if len(ids) < 10 {
		t.Fatalf("only %d operations with a body", len(ids))
	}
	for id := range ids {
		for _, body := range decodeBodies {
			want, got := api.NewRequestBody(id), api.NewRequestBody(id)
			wantErr := oldStrict([]byte(body), want)
			gotErr := decodeStrict([]byte(body), got)
			if (wantErr == nil) != (gotErr == nil) {
				t.Errorf("%s %s: encoding/json says %v, decodeStrict %v", id, body, wantErr, gotErr)
				continue
			}
			if wantErr != nil {
				if f, g := fieldOf(wantErr), fieldOf(gotErr); f != g {
					t.Errorf("%s %s: encoding/json names %q (%v), decodeStrict %q (%v)", id, body, f, wantErr, g, gotErr)
				}
				continue
			}
			if !reflect.DeepEqual(want, got) {
				t.Errorf("%s %s: encoding/json decoded %+v, decodeStrict %+v", id, body, want, got)
			}
		}
	}
}

func fieldOf(err error) string {
	var p *problem.Error
	if errors.As(err, &p) {
		return p.Field
	}
	return "(not a problem: " + err.Error() + ")"
}

// FuzzDecodeStrict: whatever the body, decodeStrict agrees with
// encoding/json on taking or refusing it, on the field a refusal names
// and on what it decodes, for the bodies of the lease operations.
func FuzzDecodeStrict(f *testing.F) {
	for _, b := range decodeBodies {
		f.Add(b)
	}
	ops := []string{"acquireLock", "releaseLock", "renewLock", "acquireLockSet", "createSession", "acquireSemaphore"}
	f.Fuzz(func(t *testing.T, body string) {
		if len(bytes.TrimSpace([]byte(body))) == 0 {
			return // checkBody takes an empty body before decoding
		}
		for _, id := range ops {
			want, got := api.NewRequestBody(id), api.NewRequestBody(id)
			if want == nil {
				t.Fatalf("no body type for %s", id)
			}
			wantErr, gotErr := oldStrict([]byte(body), want), decodeStrict([]byte(body), got)
			switch {
			case (wantErr == nil) != (gotErr == nil):
				t.Fatalf("%s %q: encoding/json says %v, decodeStrict %v", id, body, wantErr, gotErr)
			case wantErr != nil && fieldOf(wantErr) != fieldOf(gotErr):
				t.Fatalf("%s %q: encoding/json names %q, decodeStrict %q", id, body, fieldOf(wantErr), fieldOf(gotErr))
			case wantErr == nil && !reflect.DeepEqual(want, got):
				t.Fatalf("%s %q: encoding/json decoded %+v, decodeStrict %+v", id, body, want, got)
			}
		}
	})
}
