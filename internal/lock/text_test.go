package lock_test

import (
	"strings"
	"testing"

	"github.com/lockd/lockd/internal/lock"
)

func TestCheckText(t *testing.T) {
	tests := []struct {
		in   string
		want string // "" = accepted
	}{
		{"stuck after deploy", ""},
		{"", ""},
		{"déployé — 部署 ✓", ""},
		{strings.Repeat("é", 500), ""},
		{strings.Repeat("r", 501), "at most 500 characters, got 501"},
		{"line1\nline2", "U+000A"},
		{"a\tb", "U+0009"},
		{"\x1b[31mred", "U+001B"},
		{"nul\x00", "U+0000"},
		{"\u202eevil", "U+202E"},
		{"bad \xff utf-8", "valid UTF-8"},
	}
	for _, tc := range tests {
		err := lock.CheckText(tc.in, lock.MaxReason)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("CheckText(%q) = %v, want nil", tc.in, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("CheckText(%q) = %v, want an error with %q", tc.in, err, tc.want)
		}
	}
}
