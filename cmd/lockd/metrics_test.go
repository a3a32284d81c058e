package main

import (
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/lockd/lockd/internal/redistest"
)

// TestMetricsBuildInfoAndRedisLatency: /metrics says which lockd answers
// (lockd_build_info, with the version --version prints) and how long its
// round trips to Redis take, script calls apart (newcomer #23).
func TestMetricsBuildInfoAndRedisLatency(t *testing.T) {
	inst := startServe(t, map[string]string{"LOCKD_REDIS": redistest.Start(t).URL()})
	for range 3 {
		if status, _ := post(t, inst.url+"/v1/locks/metrics:a/acquire", `{"owner":"m","ttl_ms":1000}`); status != 200 && status != 409 {
			t.Fatalf("acquire: %d", status)
		}
	}
	res, err := http.Get(inst.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	text := string(b)

	v, _ := buildVersion()
	info := regexp.MustCompile(`(?m)^lockd_build_info\{commit="[^"]*",goversion="go[^"]+",version="` + regexp.QuoteMeta(v) + `"\} 1$`)
	if !info.MatchString(text) {
		t.Errorf("no lockd_build_info with version %q:\n%s", v, grep(text, "lockd_build_info"))
	}
	count := regexp.MustCompile(`(?m)^lockd_redis_call_duration_seconds_count\{call="script"\} (\d+)$`).FindStringSubmatch(text)
	if count == nil {
		t.Fatalf("no script series of lockd_redis_call_duration_seconds:\n%s", grep(text, "lockd_redis_call"))
	}
	if n, _ := strconv.Atoi(count[1]); n < 3 {
		t.Errorf("%d script round trips timed, want at least the 3 acquires", n)
	}
}

// grep is the lines of text that contain s.
func grep(text, s string) string {
	var out []string
	for _, line := range strings.Split(text, "\n") {
		if strings.Contains(line, s) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

// TestMetricsKeysHeldNow: lockd_keys_held says how many keys hold a lease
// now, whichever replica granted them (newcomer #23: no gauge of what is
// held), and follows a release.
func TestMetricsKeysHeldNow(t *testing.T) {
	rs := redistest.Start(t)
	a := startServe(t, map[string]string{"LOCKD_REDIS": rs.URL()})
	b := startServe(t, map[string]string{"LOCKD_REDIS": rs.URL()})
	held := func() string {
		res, err := http.Get(b.url + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		return regexp.MustCompile(`(?m)^lockd_keys_held .*$`).FindString(string(body))
	}
	if got := held(); got != "lockd_keys_held 0" {
		t.Fatalf("nothing held: %q", got)
	}
	_, l := post(t, a.url+"/v1/locks/held:a/acquire", `{"owner":"m","ttl_ms":60000}`)
	post(t, a.url+"/v1/semaphores/held:pool/acquire", `{"limit":3,"ttl_ms":60000}`)
	post(t, a.url+"/v1/semaphores/held:pool/acquire", `{"limit":3,"ttl_ms":60000}`)
	post(t, a.url+"/v1/elections/held:leader/campaign", `{"candidate":"c","ttl_ms":60000}`)
	if got := held(); got != "lockd_keys_held 3" {
		t.Fatalf("a lock, a semaphore with two permits and a leadership, through the other replica: %q", got)
	}
	post(t, a.url+"/v1/locks/held:a/release", `{"token":"`+l["token"].(string)+`"}`)
	if got := held(); got != "lockd_keys_held 2" {
		t.Fatalf("after the lock's release: %q", got)
	}
}
