package manifests

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nicaffinity/nicaffinity/pkg/allocproxy"
	"github.com/nicaffinity/nicaffinity/pkg/exporter"
	"github.com/nicaffinity/nicaffinity/pkg/plugins/nicaffinity"
)

type dashboard struct {
	Title  string `json:"title"`
	UID    string `json:"uid"`
	Panels []struct {
		ID      int    `json:"id"`
		Title   string `json:"title"`
		Targets []struct {
			RefID string `json:"refId"`
			Expr  string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

var metricName = regexp.MustCompile(`nicaffinity_(scheduler|exporter|allocation_proxy)_[a-z_]+`)

// registered lists the names of the metrics the scheduler plugin, the
// exporter and the allocation proxy define: the plugin's as it names them, the exporter's from the
// descriptions its collectors give (a vector with no samples yet is
// described, though not gathered).
func registered(t *testing.T) []string {
	t.Helper()
	names := nicaffinity.MetricNames()
	m := exporter.NewMetrics()
	ch := make(chan *prometheus.Desc, 64)
	for _, c := range []prometheus.Collector{m.Publishes, m.PublishDuration, m.SourceErrors, m.Verifications, m.LastPublish, m.Blocked} {
		c.Describe(ch)
	}
	p := allocproxy.NewMetrics()
	for _, c := range []prometheus.Collector{p.Preferred, p.Registrations, p.Fronts} {
		c.Describe(ch)
	}
	close(ch)
	fq := regexp.MustCompile(`fqName: "([^"]+)"`)
	for d := range ch {
		if s := fq.FindStringSubmatch(d.String()); s != nil {
			names = append(names, s[1])
		}
	}
	if len(names) < 10 {
		t.Fatalf("found %d metric names: %v", len(names), names)
	}
	return names
}

// TestMetricsDocumented: docs/metrics.md names every metric the scheduler
// plugin, the exporter and the allocation proxy register, and no other.
func TestMetricsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `(nicaffinity_[a-z_]+)` \\|").FindAllStringSubmatch(string(doc), -1) {
		documented[m[1]] = true
	}
	have := map[string]bool{}
	for _, n := range registered(t) {
		if metricName.MatchString(n) {
			have[n] = true
		}
	}
	for n := range have {
		if !documented[n] {
			t.Errorf("%s is registered but not in docs/metrics.md", n)
		}
	}
	for n := range documented {
		if !have[n] {
			t.Errorf("docs/metrics.md lists %s, which nothing registers", n)
		}
	}
}

// TestGrafanaDashboard: the dashboard is valid JSON of the expected shape,
// every panel queries something, and every metric it queries exists.
func TestGrafanaDashboard(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(manifestsDir, "grafana", "nicaffinity.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("dashboard: %v", err)
	}
	if d.Title == "" || d.UID == "" || len(d.Panels) == 0 {
		t.Fatalf("dashboard without title, uid or panels: %+v", d)
	}
	names := registered(t)
	ids := map[int]bool{}
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d twice", p.ID)
		}
		ids[p.ID] = true
		if len(p.Targets) == 0 {
			t.Errorf("panel %q queries nothing", p.Title)
		}
		for _, tg := range p.Targets {
			used := metricName.FindAllString(tg.Expr, -1)
			if len(used) == 0 {
				t.Errorf("panel %q: %q uses no nicaffinity metric", p.Title, tg.Expr)
			}
			// Scheduler series carry the plugin instance's profile, and
			// the dashboard's profile variable selects them.
			if strings.Contains(tg.Expr, "nicaffinity_scheduler_") && strings.Count(tg.Expr, `profile=~"$profile"`) != strings.Count(tg.Expr, "nicaffinity_scheduler_") {
				t.Errorf("panel %q: %q does not filter every scheduler metric on the profile variable", p.Title, tg.Expr)
			}
			for _, m := range used {
				base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(m, "_bucket"), "_sum"), "_count")
				if !slices.Contains(names, base) {
					t.Errorf("panel %q queries %s, which nothing registers", p.Title, m)
				}
			}
		}
	}
}
