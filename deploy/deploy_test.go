package deploy

import (
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

// metricsInSource are the metric names lockd's Go code declares.
func metricsInSource(t *testing.T) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	decl := regexp.MustCompile(`Name:\s*"(lockd_[a-z_]+)"`)
	for _, dir := range []string{"../internal", "../cmd"} {
		err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
				return err
			}
			b, err := os.ReadFile(p)
			for _, m := range decl.FindAllStringSubmatch(string(b), -1) {
				names[m[1]] = true
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(names) < 10 {
		t.Fatalf("found only %d metric declarations: %v", len(names), names)
	}
	return names
}

var used = regexp.MustCompile(`lockd_[a-z_]+`)

// checkMetrics fails for every lockd_ metric in expr that lockd does not
// export (histograms' _bucket, _count and _sum count as theirs).
func checkMetrics(t *testing.T, where, expr string, known map[string]bool) {
	t.Helper()
	for _, m := range used.FindAllString(expr, -1) {
		base := m
		for _, suf := range []string{"_bucket", "_count", "_sum"} {
			base = strings.TrimSuffix(base, suf)
		}
		if !known[m] && !known[base] {
			t.Errorf("%s uses %s, which lockd does not export", where, m)
		}
	}
}

// The alert rules are valid Prometheus rule YAML (promtool's structure:
// groups of rules, each with alert, expr, a duration for "for", severity
// and summary), and use only lockd's metrics.
func TestAlertRules(t *testing.T) {
	b, err := os.ReadFile("prometheus/lockd-alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Groups []struct {
			Name  string `yaml:"name"`
			Rules []struct {
				Alert       string            `yaml:"alert"`
				Expr        string            `yaml:"expr"`
				For         string            `yaml:"for"`
				Labels      map[string]string `yaml:"labels"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		t.Fatal(err)
	}
	known := metricsInSource(t)
	want := map[string]bool{"LockdLockHeldTooLong": false, "LockdWaitersPilingUp": false, "LockdWebhookBacklog": false, "LockdRedisErrors": false}
	for _, g := range f.Groups {
		if g.Name == "" || len(g.Rules) == 0 {
			t.Errorf("group %q has no name or no rules", g.Name)
		}
		for _, r := range g.Rules {
			if r.Alert == "" || strings.TrimSpace(r.Expr) == "" {
				t.Errorf("rule %q: alert and expr are required", r.Alert)
			}
			if r.For != "" {
				if _, err := time.ParseDuration(r.For); err != nil {
					t.Errorf("%s: for %q: %v", r.Alert, r.For, err)
				}
			}
			if s := r.Labels["severity"]; s != "warning" && s != "critical" {
				t.Errorf("%s: severity %q", r.Alert, s)
			}
			if r.Annotations["summary"] == "" {
				t.Errorf("%s: no summary", r.Alert)
			}
			if strings.Count(r.Expr, "(") != strings.Count(r.Expr, ")") {
				t.Errorf("%s: unbalanced parentheses", r.Alert)
			}
			checkMetrics(t, r.Alert, r.Expr, known)
			if _, ok := want[r.Alert]; ok {
				want[r.Alert] = true
			}
		}
	}
	for a, ok := range want {
		if !ok {
			t.Errorf("no %s alert", a)
		}
	}
}

// The Grafana dashboard is JSON with panels whose queries use only lockd's
// metrics.
func TestGrafanaDashboard(t *testing.T) {
	b, err := os.ReadFile("grafana/lockd-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Title  string `json:"title"`
		UID    string `json:"uid"`
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	if d.Title == "" || d.UID == "" || len(d.Panels) < 8 {
		t.Fatalf("dashboard %q (%s) with %d panels", d.Title, d.UID, len(d.Panels))
	}
	known := metricsInSource(t)
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			checkMetrics(t, p.Title, tg.Expr, known)
		}
	}
}
