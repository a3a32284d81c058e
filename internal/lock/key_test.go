package lock_test

import (
	"regexp"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/lockd/lockd/api"
	"github.com/lockd/lockd/internal/lock"
)

// contractPatterns are the key and prefix patterns of api/openapi.yaml, so
// that the fuzzers hold the code to the document, not to a copy of it.
func contractPatterns(t testing.TB) (key, prefix *regexp.Regexp) {
	t.Helper()
	var doc struct {
		Paths map[string]map[string]struct {
			Parameters []struct {
				Name   string `yaml:"name"`
				Schema struct {
					Pattern string `yaml:"pattern"`
				} `yaml:"schema"`
			} `yaml:"parameters"`
		} `yaml:"paths"`
		Components struct {
			Parameters map[string]struct {
				Schema struct {
					Pattern string `yaml:"pattern"`
				} `yaml:"schema"`
			} `yaml:"parameters"`
		} `yaml:"components"`
	}
	if err := yaml.Unmarshal(api.OpenAPI, &doc); err != nil {
		t.Fatal(err)
	}
	prefixPattern := doc.Components.Parameters["Prefix"].Schema.Pattern
	keyPattern := doc.Components.Parameters["Key"].Schema.Pattern
	if keyPattern == "" || prefixPattern == "" {
		t.Fatalf("openapi.yaml: key pattern %q, prefix pattern %q", keyPattern, prefixPattern)
	}
	// Semaphore names are lock keys too (SemaphoreKey).
	if sem := doc.Components.Parameters["SemaphoreKey"].Schema.Pattern; sem != keyPattern {
		t.Fatalf("openapi.yaml: semaphore name pattern %q, key pattern %q", sem, keyPattern)
	}
	return regexp.MustCompile(keyPattern), regexp.MustCompile(prefixPattern)
}

var keySeeds = []string{"order:pay:12345", "", "a", ".a", "a/b", "a b", "ä", strings.Repeat("k", 200), strings.Repeat("k", 201), "a\x00", "A-Z_0.9@x:y", "{k}", "k*", ":", "a:"}

func FuzzValidKey(f *testing.F) {
	key, _ := contractPatterns(f)
	for _, s := range keySeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := lock.ValidKey(s), key.MatchString(s); got != want {
			t.Fatalf("ValidKey(%q) = %v, the contract says %v", s, got, want)
		}
	})
}

func FuzzValidPrefix(f *testing.F) {
	_, prefix := contractPatterns(f)
	for _, s := range keySeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := lock.ValidPrefix(s), prefix.MatchString(s); got != want {
			t.Fatalf("ValidPrefix(%q) = %v, the contract says %v", s, got, want)
		}
	})
}
