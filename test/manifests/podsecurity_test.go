package manifests

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
	"sigs.k8s.io/yaml"
)

// TestPodSecurity evaluates the rendered pod templates with the Pod
// Security admission's own checks at the level each namespace enforces:
// the scheduler meets restricted; the exporter meets baseline but for its
// hostPath volumes, the one thing its namespace is privileged for.
func TestPodSecurity(t *testing.T) {
	eval, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		t.Fatal(err)
	}
	enforced := map[string]string{}
	templates := map[string]corev1.PodTemplateSpec{}
	for _, doc := range kustomizeBuild(t) {
		var obj struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name, Namespace string
				Labels          map[string]string
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal(doc, &obj); err != nil {
			t.Fatal(err)
		}
		switch obj.Kind {
		case "Namespace":
			enforced[obj.Metadata.Name] = obj.Metadata.Labels[api.EnforceLevelLabel]
		case "Deployment":
			var d appsv1.Deployment
			if err := yaml.UnmarshalStrict(doc, &d); err != nil {
				t.Fatal(err)
			}
			templates[d.Namespace+"/"+d.Name] = d.Spec.Template
		case "DaemonSet":
			var d appsv1.DaemonSet
			if err := yaml.UnmarshalStrict(doc, &d); err != nil {
				t.Fatal(err)
			}
			templates[d.Namespace+"/"+d.Name] = d.Spec.Template
		}
	}
	check := func(key string, level api.Level) []string {
		t.Helper()
		tmpl, ok := templates[key]
		if !ok {
			t.Fatalf("no workload %s among %v", key, templates)
		}
		r := policy.AggregateCheckResults(eval.EvaluatePod(api.LevelVersion{Level: level, Version: api.LatestVersion()}, &tmpl.ObjectMeta, &tmpl.Spec))
		if r.Allowed {
			return nil
		}
		return r.ForbiddenReasons
	}
	if got := enforced["nicaffinity-system"]; got != "restricted" {
		t.Errorf("nicaffinity-system enforces %q, want restricted", got)
	}
	if reasons := check("nicaffinity-system/nicaffinity-scheduler", api.LevelRestricted); reasons != nil {
		t.Errorf("the scheduler does not meet restricted: %v", reasons)
	}
	if got := enforced["nicaffinity-node"]; got != "privileged" {
		t.Errorf("nicaffinity-node enforces %q, want privileged (the exporter's hostPath volumes)", got)
	}
	if reasons := check("nicaffinity-node/topology-exporter", api.LevelBaseline); len(reasons) != 1 || !strings.Contains(reasons[0], "hostPath") {
		t.Errorf("the exporter against baseline: %v, want only the hostPath volumes refused", reasons)
	}
}
