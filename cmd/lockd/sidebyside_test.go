package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/lockd/lockd/internal/redistest"
)

// sameLayout is the last commit before the scripts' common path was cut
// down (issue 21: SET NX GET for a free key, shorter calls and replies):
// a release of the same data layout, which this one must serve beside.
const sameLayout = "e431654d0aceca10fd0f9653b0868691090f764d"

// The release before and this one on one Redis, both serving: each
// honours the other's leases, a key the other released is granted (this
// release's SET NX path reads the other's history), fences keep rising,
// a waiter of one is granted the key the other releases, and each reads
// the other's history.
func TestSideBySideWithPreviousRelease(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the previous release")
	}
	rs := redistest.Start(t)
	oldURL, _ := serveBinary(t, buildRelease(t, sameLayout), rs.URL())
	newURL, _ := serveProcess(t, rs.URL())
	sides := []struct{ name, url, other string }{{"previous", oldURL, newURL}, {"this", newURL, oldURL}}

	fence := 0.0
	for round := range 3 {
		for _, s := range sides {
			key := "sbs:a"
			code, l := post(t, s.url+"/v1/locks/"+key+"/acquire", `{"owner":"`+s.name+`","ttl_ms":60000}`)
			if code != 200 || l["fence"].(float64) <= fence {
				t.Fatalf("round %d, %s release: acquire of a key the other released: %d %v, want a fence past %v", round, s.name, code, l, fence)
			}
			fence = l["fence"].(float64)
			if code, p := post(t, s.other+"/v1/locks/"+key+"/acquire", `{"owner":"other"}`); code != 409 || p["holder"] != s.name {
				t.Fatalf("round %d: the other release granted a key the %s release holds: %d %v", round, s.name, code, p)
			}
			if code, p := post(t, s.other+"/v1/locks/"+key+"/renew", `{"token":"`+l["token"].(string)+`"}`); code != 200 || p["fence"] != l["fence"] {
				t.Fatalf("round %d: renew through the other release: %d %v", round, code, p)
			}
			if code, p := post(t, s.other+"/v1/locks/"+key+"/release", `{"token":"`+l["token"].(string)+`"}`); code != 200 {
				t.Fatalf("round %d: release through the other release: %d %v", round, code, p)
			}
		}
	}

	// A waiter of one is granted what the other releases, and the
	// history each reads holds both releases' events.
	for _, s := range sides {
		key := "sbs:wait:" + s.name
		code, l := post(t, s.url+"/v1/locks/"+key+"/acquire", `{"owner":"`+s.name+`","ttl_ms":60000}`)
		if code != 200 {
			t.Fatalf("%s release: acquire: %d %v", s.name, code, l)
		}
		granted := make(chan string, 1)
		go func() {
			code, p := post(t, s.other+"/v1/locks/"+key+"/acquire", `{"owner":"waiter","ttl_ms":60000,"wait_ms":10000}`)
			granted <- fmt.Sprint(code, " ", p["owner"])
		}()
		waitQueued(t, s.url, key)
		if code, p := post(t, s.url+"/v1/locks/"+key+"/release", `{"token":"`+l["token"].(string)+`"}`); code != 200 {
			t.Fatalf("%s release: release: %d %v", s.name, code, p)
		}
		if got := <-granted; got != "200 waiter" {
			t.Fatalf("the waiter on the other release after the %s release's release: %s", s.name, got)
		}
		if got := historyOf(t, s.url, key); got != "acquired:waiter released:"+s.name+" acquired:"+s.name {
			t.Fatalf("history of %s through the %s release: %q", key, s.name, got)
		}
	}

	// A lease one grants lapses on the expiry schedule both keep: the
	// other records it.
	for _, s := range sides {
		key := "sbs:lapse:" + s.name
		if code, p := post(t, s.url+"/v1/locks/"+key+"/acquire", `{"owner":"`+s.name+`","ttl_ms":300}`); code != 200 {
			t.Fatalf("%s release: acquire: %d %v", s.name, code, p)
		}
		time.Sleep(400 * time.Millisecond)
		if got := historyOf(t, s.other, key); got != "expired:"+s.name+" acquired:"+s.name {
			t.Fatalf("history of %s, lapsed, through the other release: %q", key, got)
		}
	}
}

// historyOf is key's history read through url, newest first, as
// "type:owner" words.
func historyOf(t *testing.T, url, key string) string {
	t.Helper()
	code, body := get(t, url+"/v1/locks/"+key+"/history", "")
	var h struct {
		Events []struct{ Type, Owner string } `json:"events"`
	}
	if err := json.Unmarshal([]byte(body), &h); code != 200 || err != nil {
		t.Fatalf("history: %d %s", code, body)
	}
	var seen []string
	for _, e := range h.Events {
		seen = append(seen, e.Type+":"+e.Owner)
	}
	return strings.Join(seen, " ")
}

// waitQueued waits until key's state, read through url, shows a waiter.
func waitQueued(t *testing.T, url, key string) {
	t.Helper()
	for range 200 {
		_, body := get(t, url+"/v1/locks/"+key, "")
		if strings.Contains(body, `"waiters":1`) {
			return
		}
		time.Sleep(25 * time.Millisecond)
	}
	t.Fatalf("no waiter queued on %s", key)
}
