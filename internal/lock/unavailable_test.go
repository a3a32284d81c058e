package lock

import (
	"errors"
	"testing"
)

// redisError is a reply error as go-redis returns it (redis.Error).
type redisError string

func (e redisError) Error() string { return string(e) }
func (redisError) RedisError()     {}

// F7: the replies of a Redis that cannot take writes right now are
// ErrUnavailable (503), never an internal error (500).
func TestUnavailableReplies(t *testing.T) {
	tests := []struct {
		reply string
		want  bool
	}{
		{"OOM command not allowed when used memory > 'maxmemory'.", true},
		{"OOM command not allowed when used memory > 'maxmemory'. script: abc, on @user_script:12.", true},
		{"READONLY You can't write against a read only replica.", true},
		{"LOADING Redis is loading the dataset in memory", true},
		{"MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.", true},
		// Replica acks on a master that a failover has just made a
		// replica: a script that wrote nothing ran, its WAIT did not.
		{"ERR WAIT cannot be used with replica instances. Please also note that since Redis 4.0 if a replica is configured to be writable (which is not the default) writes to replicas are just local and are not propagated.", true},
		{"NOSCRIPT No matching script. Please use EVAL.", false},
		{"ERR user_script:1: Script attempted to access nonexistent global variable", false},
		{"WRONGTYPE Operation against a key holding the wrong kind of value", false},
	}
	for _, tc := range tests {
		t.Run(tc.reply, func(t *testing.T) {
			err := wrap("acquire", redisError(tc.reply))
			if got := errors.Is(err, ErrUnavailable); got != tc.want {
				t.Fatalf("unavailable(%q) = %v, want %v", tc.reply, got, tc.want)
			}
		})
	}
}
