package lock

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestScriptHeaders holds each script's header (the KEYS[n] and ARGV[n]
// it names) to its call type in protocol.go: as many keys and arguments,
// and no body that reads one past them.
func TestScriptHeaders(t *testing.T) {
	e := &Engine{arg: args{historyMax: 1, retention: 1, eventsMax: 1, renewalsMax: 1, replica: "r", alive: 1, queueTTL: 1}}
	k := keysOf("k")
	sh := &sharedKeys{}
	calls := map[string]func() ([]string, []any){
		"acquire":       func() ([]string, []any) { return acquireCall{keys: k, shared: sh}.run(e) },
		"renew":         func() ([]string, []any) { return renewCall{keys: k, shared: sh}.run(e) },
		"release":       func() ([]string, []any) { return releaseCall{keys: k, shared: sh}.run(e) },
		"force_release": func() ([]string, []any) { return forceReleaseCall{keys: k, shared: sh}.run(e) },
		"history":       func() ([]string, []any) { return historyCall{keys: k, shared: sh}.run(e) },
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			src := mustRead(name)
			var header strings.Builder
			for _, line := range strings.Split(src, "\n") {
				if !strings.HasPrefix(line, "--") {
					break
				}
				header.WriteString(line + "\n")
			}
			keys, argv := call()
			for _, c := range []struct {
				what string
				n    int
			}{{"KEYS", len(keys)}, {"ARGV", len(argv)}} {
				if got := highest(header.String(), c.what); got != c.n {
					t.Errorf("%s.lua's header names %s up to %d; its call passes %d", name, c.what, got, c.n)
				}
				if got := highest(src, c.what); got > c.n {
					t.Errorf("%s.lua reads %s[%d]; its call passes %d", name, c.what, got, c.n)
				}
			}
		})
	}
}

// highest is the largest n of what[n] in src.
func highest(src, what string) int {
	top := 0
	for _, m := range regexp.MustCompile(what+`\[(\d+)\]`).FindAllStringSubmatch(src, -1) {
		n, _ := strconv.Atoi(m[1])
		top = max(top, n)
	}
	return top
}
