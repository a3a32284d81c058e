package problem_test

import (
	"os"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/lockd/lockd/api"
)

// docs/api.md's error table has a row for every code of the contract, so
// that a code added to openapi.yaml cannot go undocumented.
func TestDocsErrorTable(t *testing.T) {
	var doc struct {
		Components struct {
			Schemas struct {
				Problem struct {
					Properties struct {
						Code struct {
							Enum []string `yaml:"enum"`
						} `yaml:"code"`
					} `yaml:"properties"`
				} `yaml:"Problem"`
			} `yaml:"schemas"`
		} `yaml:"components"`
	}
	if err := yaml.Unmarshal(api.OpenAPI, &doc); err != nil {
		t.Fatal(err)
	}
	codes := doc.Components.Schemas.Problem.Properties.Code.Enum
	if len(codes) == 0 {
		t.Fatal("no problem codes in openapi.yaml")
	}
	md, err := os.ReadFile("../../docs/api.md")
	if err != nil {
		t.Fatal(err)
	}
	_, errors, ok := strings.Cut(string(md), "\n## Errors\n")
	if !ok {
		t.Fatal("docs/api.md has no Errors section")
	}
	errors, _, _ = strings.Cut(errors, "\n## ")
	for _, c := range codes {
		if !strings.Contains(errors, "\n| `"+c+"` |") {
			t.Errorf("docs/api.md's error table has no row for %s", c)
		}
	}
}
