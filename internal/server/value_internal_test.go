package server

import (
	"bytes"
	"encoding/json"
	"testing"
)

// portableJSON never panics on valid JSON, and refuses every number that
// Go's own decoder cannot read as a float64.
func FuzzPortableJSON(f *testing.F) {
	for _, s := range []string{`1e999999`, `-1e-400`, `"\ud800"`, `"\ud83d\ude00"`, `"\\ud800"`, `{"\udc00":[1,"\ud800\u0041"]}`, `"\ud800\ud800"`, `[1.5,-0,"\u00e9"]`, `"\"\\u"`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var b bytes.Buffer
		if json.Compact(&b, []byte(s)) != nil {
			return
		}
		err := portableJSON(b.Bytes())
		var v any
		if json.Unmarshal(b.Bytes(), &v) != nil && err == nil {
			t.Fatalf("accepted %s, which Go cannot decode", b.Bytes())
		}
	})
}
