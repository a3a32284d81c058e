package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A client that sends its headers slowly, or its body never, is cut off.
func TestSlowClientsAreCutOff(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
	})
	srv := newHTTPServer(h, time.Second, timeouts{header: 200 * time.Millisecond, read: 400 * time.Millisecond, idle: time.Second, writeSlack: time.Second})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })

	tests := []struct {
		name  string
		send  string
		limit time.Duration
	}{
		{"headers never end", "POST /v1/locks/k/acquire HTTP/1.1\r\nHost: x\r\n", 200 * time.Millisecond},
		{"body never comes", "POST /v1/locks/k/acquire HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{", 400 * time.Millisecond},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// The server's deadline starts when it accepts, which may be
			// before Dial returns here: time from before the dial, or a
			// close right on time looks early.
			start := time.Now()
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := c.Write([]byte(tc.send)); err != nil {
				t.Fatal(err)
			}
			_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
			_, _ = io.ReadAll(c) // returns when the server closes the connection
			if d := time.Since(start); d < tc.limit || d > tc.limit+2*time.Second {
				t.Fatalf("connection closed after %v, want about %v", d, tc.limit)
			}
		})
	}
	if s := newHTTPServer(h, time.Minute, httpTimeouts); s.ReadHeaderTimeout != 5*time.Second || s.ReadTimeout != 15*time.Second ||
		s.WriteTimeout != 75*time.Second || s.IdleTimeout != 120*time.Second || s.MaxHeaderBytes != 64<<10 {
		t.Fatalf("production timeouts: %+v", s)
	}
}

func TestServeTLS(t *testing.T) {
	cert, key := selfSigned(t)
	inst := startServeTLS(t, cert, key)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	res, err := client.Get(inst + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 200 || res.TLS == nil {
		t.Fatalf("https healthz: %d, TLS %v", res.StatusCode, res.TLS != nil)
	}
}

// startServeTLS runs lockd serve with a certificate and returns its https URL.
func startServeTLS(t *testing.T, cert, key string) string {
	inst := startServe(t, nil, "--tls-cert", cert, "--tls-key", key)
	if !strings.HasPrefix(inst.url, "https://") {
		t.Fatalf("lockd serve with a certificate listens on %s", inst.url)
	}
	return inst.url
}

func selfSigned(t *testing.T) (certFile, keyFile string) {
	t.Helper()
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &priv.PublicKey, priv)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	_ = os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	_ = os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600)
	return certFile, keyFile
}
