package main

import (
	"context"
	"crypto/tls"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/lockd/lockd/internal/redistest"
)

// lockd reaches a Redis that speaks only TLS and wants a password, taken
// from LOCKD_REDIS_PASSWORD, and never logs it.
func TestServeOnTLSRedisWithPassword(t *testing.T) {
	const password = "redis-password-0123456789"
	cert, key := selfSigned(t)
	rs := redistest.StartWith(t,
		func(n int) []string { return []string{"--port", "0", "--tls-port", strconv.Itoa(n)} },
		[]string{"--tls-cert-file", cert, "--tls-key-file", key, "--tls-ca-cert-file", cert,
			"--tls-auth-clients", "no", "--requirepass", password},
		func(addr string) error {
			c := redis.NewClient(&redis.Options{Addr: addr, Password: password, MaxRetries: -1,
				TLSConfig: &tls.Config{InsecureSkipVerify: true}})
			defer c.Close()
			return c.Ping(context.Background()).Err()
		})
	inst := startServe(t, map[string]string{
		// The test's certificate is self-signed; go-redis reads skip_verify from the URL.
		"LOCKD_REDIS":          "rediss://" + rs.Addr + "/0?skip_verify=true",
		"LOCKD_REDIS_PASSWORD": password,
	})
	if status, l := post(t, inst.url+"/v1/locks/tls:1/acquire", `{"owner":"o"}`); status != 200 || l["owner"] != "o" {
		t.Fatalf("acquire through TLS Redis: %d %v", status, l)
	}
	res, err := http.Get(inst.url + "/readyz")
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("readyz: %v", err)
	}
	res.Body.Close()
	if !strings.Contains(inst.out.String(), `"tls":true`) {
		t.Fatalf("the log does not say Redis is on TLS:\n%s", inst.out)
	}
	if strings.Contains(inst.out.String(), password) {
		t.Fatal("the Redis password appears in the log")
	}

	// A replica with the wrong password answers 503, never 500, and says why
	// in its log.
	bad := startServe(t, map[string]string{
		"LOCKD_REDIS":          "rediss://" + rs.Addr + "/0?skip_verify=true",
		"LOCKD_REDIS_PASSWORD": "not-the-password",
	})
	if status, p := post(t, bad.url+"/v1/locks/tls:2/acquire", `{}`); status != 503 || p["code"] != "backend_unavailable" {
		t.Fatalf("acquire with a wrong Redis password: %d %v", status, p)
	}
	if !strings.Contains(bad.out.String(), "WRONGPASS") || strings.Contains(bad.out.String(), "not-the-password") {
		t.Fatalf("the log should say WRONGPASS without the password:\n%s", bad.out)
	}
}
