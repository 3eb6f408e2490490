package manifests

import (
	"os"
	"regexp"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"
)

// TestRBACDocumented: docs/security.md's RBAC table names every rule the
// chart grants (with the allocation proxy and annotateAt: PreBind on: all
// that manifests/ holds too, TestChartMatchesManifests) and no other, one
// verb and resource at a time, and every role the manifests bind.
func TestRBACDocumented(t *testing.T) {
	docs := mustRender(t, loadChart(t), map[string]any{
		"allocationProxy": map[string]any{"enabled": true},
		"scheduler":       map[string]any{"pluginArgs": map[string]any{"annotateAt": "PreBind"}},
	})
	granted := map[string]bool{} // "role|group|resource|verb"
	bound := map[string]bool{}
	for _, d := range docs {
		var meta struct{ Kind string }
		if err := yaml.Unmarshal(d, &meta); err != nil {
			t.Fatal(err)
		}
		switch meta.Kind {
		case "ClusterRole", "Role":
			var r rbacv1.ClusterRole // a Role has the same fields
			if err := yaml.Unmarshal(d, &r); err != nil {
				t.Fatal(err)
			}
			for _, rule := range r.Rules {
				for _, g := range rule.APIGroups {
					for _, res := range rule.Resources {
						for _, v := range rule.Verbs {
							granted[strings.Join([]string{r.Name, g, res, v}, "|")] = true
						}
					}
				}
			}
		case "ClusterRoleBinding", "RoleBinding":
			var b rbacv1.RoleBinding
			if err := yaml.Unmarshal(d, &b); err != nil {
				t.Fatal(err)
			}
			bound[b.RoleRef.Name] = true
		}
	}
	if len(granted) == 0 {
		t.Fatal("the rendered chart grants nothing")
	}
	doc, err := os.ReadFile("../../docs/security.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(doc)
	start := strings.Index(text, "\n## RBAC\n")
	if start < 0 {
		t.Fatal("docs/security.md has no RBAC section")
	}
	text = text[start+1:]
	if end := strings.Index(text[3:], "\n## "); end >= 0 {
		text = text[:end+3]
	}
	code := regexp.MustCompile("`([^`]+)`")
	names := func(cell string) []string {
		var out []string
		for _, m := range code.FindAllStringSubmatch(cell, -1) {
			out = append(out, m[1])
		}
		return out
	}
	documented := map[string]bool{}
	roles := map[string]bool{}
	for _, line := range strings.Split(text, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 7 || !strings.HasPrefix(strings.TrimSpace(cells[1]), "`") {
			continue
		}
		role := names(cells[1])[0]
		roles[role] = true
		var groups []string
		for _, g := range strings.Split(cells[2], ",") {
			switch g = strings.TrimSpace(g); {
			case g == "core":
				groups = append(groups, "")
			case g != "":
				groups = append(groups, strings.Trim(g, "`"))
			}
		}
		for _, g := range groups {
			for _, res := range names(cells[3]) {
				for _, v := range names(cells[4]) {
					documented[strings.Join([]string{role, g, res, v}, "|")] = true
				}
			}
		}
	}
	for k := range granted {
		if !documented[k] {
			t.Errorf("granted but not in docs/security.md's RBAC table: %s", k)
		}
	}
	for k := range documented {
		if !granted[k] {
			t.Errorf("docs/security.md's RBAC table lists %s, which nothing grants", k)
		}
	}
	for r := range bound {
		if !roles[r] {
			t.Errorf("the role %s is bound but not in docs/security.md's RBAC table", r)
		}
	}
	if !roles["nicaffinity-topology-exporter"] {
		t.Error("the table does not name the exporter's role")
	}
}
