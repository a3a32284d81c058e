package main

import (
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lockd/lockd/internal/lockdtest"
	"github.com/lockd/lockd/internal/redistest"
)

// previousLayout is the last commit whose lockd keeps leases as hashes and
// histories as streams (data layout 1): the release a rolling upgrade
// starts from.
const previousLayout = "a60724b724373da9638e6c1d7bdb0ff69228f343"

// buildPrevious builds lockd as of previousLayout from this repository's
// history.
func buildPrevious(t *testing.T) string {
	t.Helper()
	return buildRelease(t, previousLayout)
}

// buildRelease builds lockd as of commit from this repository's history.
func buildRelease(t *testing.T, commit string) string {
	t.Helper()
	root, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Fatalf("git: %v (the upgrade test builds the previous release from the repository's history)", err)
	}
	dir := t.TempDir()
	archive := exec.Command("sh", "-c", fmt.Sprintf("git -C %q archive %s | tar -x -C %q", strings.TrimSpace(string(root)), commit, dir))
	if out, err := archive.CombinedOutput(); err != nil {
		t.Fatalf("git archive %s: %v\n%s", commit, err, out)
	}
	bin := filepath.Join(dir, "lockd-previous")
	build := exec.Command("go", "build", "-o", bin, "./cmd/lockd")
	build.Dir = dir
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build of %s: %v\n%s", commit, err, out)
	}
	return bin
}

// A rolling upgrade on one Redis: the previous release and this one side
// by side. No key is ever granted by both; the previous release's live
// leases are honoured, renewed and released by this one; the previous
// release refuses grants (503, /readyz 503) while this one runs, and
// serves again within seconds of a rollback.
func TestRollingUpgradeFromPreviousLayout(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the previous release")
	}
	old := buildPrevious(t)
	rs := redistest.Start(t)
	oldURL, _ := serveBinary(t, old, rs.URL())
	status := func(url string) int {
		res, err := http.Get(url + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}

	// Before the upgrade: the previous release holds two keys.
	code, kept := post(t, oldURL+"/v1/locks/upg:kept/acquire", `{"owner":"old-holder","ttl_ms":60000}`)
	if code != 200 {
		t.Fatalf("previous release: acquire: %d %v", code, kept)
	}
	code, other := post(t, oldURL+"/v1/locks/upg:other/acquire", `{"owner":"old-holder","ttl_ms":60000}`)
	if code != 200 {
		t.Fatalf("previous release: acquire: %d %v", code, other)
	}

	newURL, newProc := serveProcess(t, rs.URL())
	// This release honours the previous one's leases.
	code, p := post(t, newURL+"/v1/locks/upg:kept/acquire", `{"owner":"new"}`)
	if code != 409 || p["code"] != "lock_held" || p["holder"] != "old-holder" {
		t.Fatalf("this release: acquire of a key the previous one holds: %d %v, want 409 lock_held by old-holder", code, p)
	}
	// The previous release stops granting within a refresh or two.
	lockdtest.Eventually(t, func() bool { return status(oldURL) == 503 }, 5*time.Second, "the previous release's /readyz 503")
	code, p = post(t, oldURL+"/v1/locks/upg:fresh/acquire", `{"owner":"old"}`)
	if code != 503 || p["code"] != "backend_recovering" {
		t.Fatalf("previous release during the upgrade: acquire: %d %v, want 503 backend_recovering", code, p)
	}
	if s := status(newURL); s != 200 {
		t.Fatalf("this release's /readyz: %d", s)
	}

	// Its holder's renewals and release go through this release now.
	code, p = post(t, newURL+"/v1/locks/upg:kept/renew", `{"token":"`+kept["token"].(string)+`"}`)
	if code != 200 || p["fence"] != kept["fence"] {
		t.Fatalf("this release: renew of the previous one's lease: %d %v", code, p)
	}
	code, p = post(t, newURL+"/v1/locks/upg:kept/release", `{"token":"`+kept["token"].(string)+`"}`)
	if code != 200 {
		t.Fatalf("this release: release of the previous one's lease: %d %v", code, p)
	}
	code, p = post(t, newURL+"/v1/locks/upg:kept/acquire", `{"owner":"new","ttl_ms":60000}`)
	if code != 200 || p["fence"].(float64) <= kept["fence"].(float64) {
		t.Fatalf("this release: acquire after the release: %d %v, want a fence past %v", code, p, kept["fence"])
	}
	// The previous release's other lease still holds, and still ends by
	// its holder's release through the previous release.
	if code, p := post(t, newURL+"/v1/locks/upg:other/acquire", `{"owner":"new"}`); code != 409 {
		t.Fatalf("this release: acquire of the previous one's other key: %d %v", code, p)
	}
	if code, p := post(t, oldURL+"/v1/locks/upg:other/release", `{"token":"`+other["token"].(string)+`"}`); code != 200 {
		t.Fatalf("previous release: release of its own lease: %d %v", code, p)
	}

	// A rollback: this release stops; the previous one serves again, and
	// still never grants what this one holds.
	_ = newProc.Process.Kill()
	_ = newProc.Wait()
	lockdtest.Eventually(t, func() bool { return status(oldURL) == 200 }, 10*time.Second, "the previous release ready again")
	if code, p := post(t, oldURL+"/v1/locks/upg:kept/acquire", `{"owner":"old"}`); code == 200 {
		t.Fatalf("previous release granted a key this release holds: %v", p)
	}
	if code, p := post(t, oldURL+"/v1/locks/upg:after/acquire", `{"owner":"old"}`); code != 200 {
		t.Fatalf("previous release after the rollback: acquire: %d %v", code, p)
	}
}
