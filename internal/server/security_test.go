package server_test

import (
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
)

// F1: no request can create a metrics series. Made-up methods and paths
// are labelled from fixed sets.
func TestMetricsLabelsAreBounded(t *testing.T) {
	f := newFixture(t)
	series := func() []string {
		t.Helper()
		_, body, err := do(http.MethodGet, f.url+"/metrics", "", "")
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, l := range strings.Split(string(body), "\n") {
			if strings.HasPrefix(l, "lockd_http_requests_total{") || strings.HasPrefix(l, "lockd_http_request_duration_seconds_count{") {
				out = append(out, l[:strings.LastIndexByte(l, ' ')])
			}
		}
		return out
	}
	send := func(round int) {
		t.Helper()
		for i := range 20 {
			method := fmt.Sprintf("M%dX%04d", round, i)
			for _, path := range []string{"/v1/locks/k/acquire", "/v1/locks/k", fmt.Sprintf("/nope/%d/%d", round, i), "/ui/assets/x", "/"} {
				if _, _, err := do(method, f.url+path, "", ""); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	series() // the scrape itself is counted from the second on
	send(1)
	before := series()
	send(2)
	after := series()
	if len(after) != len(before) {
		t.Fatalf("a second round of made-up methods and paths added series: %d → %d\n%s", len(before), len(after), strings.Join(after, "\n"))
	}
	label := regexp.MustCompile(`(method|route)="([^"]*)"`)
	for _, s := range after {
		for _, m := range label.FindAllStringSubmatch(s, -1) {
			if strings.Contains(m[2], "M1X") || strings.Contains(m[2], "M2X") || strings.Contains(m[2], "/nope") {
				t.Fatalf("a request's own text became a label: %s", s)
			}
		}
	}
	if !strings.Contains(strings.Join(after, "\n"), `method="other"`) {
		t.Fatalf("made-up methods are not counted as other:\n%s", strings.Join(after, "\n"))
	}
}
