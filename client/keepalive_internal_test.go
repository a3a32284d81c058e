package client

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// grantExpiry counts the TTL from when the acquire was sent while that is
// sure to leave the first renewal time, and otherwise from the answer, with
// a renewal at once (issue 35).
func TestGrantExpiry(t *testing.T) {
	sent := time.Now()
	const ttl = 3 * time.Second
	tests := []struct {
		name     string
		took     time.Duration // from sent to the answer
		expires  time.Time
		renewNow bool
	}{
		{"answered at once", 2 * time.Millisecond, sent.Add(ttl), false},
		{"answered within ttl/3", ttl / 3, sent.Add(ttl), false},
		{"waited longer than ttl/3", ttl/3 + time.Millisecond, sent.Add(ttl/3 + time.Millisecond + ttl), true},
		{"waited longer than the TTL", 4 * time.Second, sent.Add(4*time.Second + ttl), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			expires, renewNow := grantExpiry(sent, sent.Add(tt.took), ttl)
			if !expires.Equal(tt.expires) || renewNow != tt.renewNow {
				t.Errorf("grantExpiry = %v after sent, renew now %v; want %v, %v",
					expires.Sub(sent), renewNow, tt.expires.Sub(sent), tt.renewNow)
			}
		})
	}
}

// A loss says what happened: an expiry that passed before a renewal could
// be sent is not blamed on the server, and a renewal the server did not
// answer in time says so.
func TestKeepAliveLossWording(t *testing.T) {
	tests := []struct {
		name    string
		expires time.Duration // from now
		renew   func(ctx context.Context) error
		want    string
		renewed bool // a renewal was sent
	}{
		{
			name:    "the expiry passed before a renewal could be sent",
			expires: -time.Second,
			renew:   func(context.Context) error { return nil },
			want:    "before a renewal could be sent: this process did not run in time",
		},
		{
			name:    "the renewal was not answered before the expiry",
			expires: 200 * time.Millisecond,
			renew: func(ctx context.Context) error {
				<-ctx.Done()
				return ctx.Err()
			},
			want:    "could not renew before the lease expired: lockd: server unavailable: a renewal sent ",
			renewed: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			expires := time.Now().Add(tt.expires)
			var lost error
			renewed := false
			keepAlive(keeper{
				stop: make(chan struct{}), ttl: 3 * time.Second, renewNow: true,
				expiry: func() time.Time { return expires },
				renew: func(ctx context.Context) error {
					renewed = true
					return tt.renew(ctx)
				},
				gone: func(error) bool { return false },
				lose: func(err error) { lost = err },
				what: "lease",
			})
			if lost == nil || !strings.Contains(lost.Error(), tt.want) {
				t.Errorf("lost with %v, want %q", lost, tt.want)
			}
			if renewed != tt.renewed {
				t.Errorf("a renewal was sent: %v, want %v", renewed, tt.renewed)
			}
			if tt.renewed && !errors.Is(lost, ErrUnavailable) {
				t.Errorf("%v does not wrap ErrUnavailable", lost)
			}
		})
	}
}
