package manifests

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	schedconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	schedscheme "k8s.io/kubernetes/pkg/scheduler/apis/config/scheme"
	"sigs.k8s.io/yaml"

	"github.com/nicaffinity/nicaffinity/pkg/apis/config"
	"github.com/nicaffinity/nicaffinity/pkg/apis/config/scheme"
	"github.com/nicaffinity/nicaffinity/pkg/plugins/nicaffinity"
)

// TestDefaultsHaveOneHome: what manifests/ (and so the chart, which
// TestChartMatchesManifests holds equal to them) install is pkg/apis/config's
// defaults: the scheduler's args decode to exactly the defaulted args, and
// the exporter's and the proxy's flags name the same level and resources.
func TestDefaultsHaveOneHome(t *testing.T) {
	docs := append(kustomizeBuild(t), kustomizeBuildDir(t, filepath.Join(manifestsDir, "allocation-proxy"))...)
	var sawArgs bool
	flags := map[string]map[string]string{}
	for _, doc := range docs {
		var obj struct {
			Kind     string                `json:"kind"`
			Metadata struct{ Name string } `json:"metadata"`
			Data     map[string]string     `json:"data"`
			Spec     struct {
				Template struct {
					Spec struct {
						Containers []struct {
							Name string   `json:"name"`
							Args []string `json:"args"`
						} `json:"containers"`
					} `json:"spec"`
				} `json:"template"`
			} `json:"spec"`
		}
		if err := yaml.Unmarshal(doc, &obj); err != nil {
			t.Fatal(err)
		}
		for _, text := range obj.Data {
			if !strings.Contains(text, "KubeSchedulerConfiguration") {
				continue
			}
			sawArgs = true
			got := schedulerArgs(t, text)
			got.TypeMeta = scheme.Defaulted().TypeMeta
			if diff := cmp.Diff(scheme.Defaulted(), got); diff != "" {
				t.Errorf("ConfigMap %s: the scheduler's args are not pkg/apis/config's defaults (-defaults,+installed):\n%s", obj.Metadata.Name, diff)
			}
		}
		for _, c := range obj.Spec.Template.Spec.Containers {
			m := map[string]string{}
			for _, a := range c.Args {
				if k, v, ok := strings.Cut(strings.TrimPrefix(a, "--"), "="); ok {
					m[k] = v
				}
			}
			flags[obj.Metadata.Name] = m
		}
	}
	if !sawArgs {
		t.Fatal("no scheduler configuration in manifests/")
	}
	want := map[string]string{
		"max-level":       config.DefaultMaxLevel,
		"gpu-resource":    config.DefaultGPUResourceName,
		"rdma-prefixes":   strings.Join(config.DefaultRDMAResourcePrefixes(), ","),
		"sriov-resources": strings.Join(config.DefaultSRIOVResourceNames(), ","),
	}
	for _, name := range []string{"topology-exporter", "allocation-proxy"} {
		got, ok := flags[name]
		if !ok {
			t.Errorf("no %s in manifests/", name)
			continue
		}
		checked := 0
		for flag, v := range want {
			if g, ok := got[flag]; ok {
				checked++
				if g != v {
					t.Errorf("%s --%s=%s; pkg/apis/config says %s", name, flag, g, v)
				}
			}
		}
		if checked < 2 {
			t.Errorf("%s sets %d of the flags with defaults in pkg/apis/config: %v", name, checked, got)
		}
	}
}

// schedulerArgs are the NICAffinity args of a KubeSchedulerConfiguration as
// kube-scheduler decodes them.
func schedulerArgs(t *testing.T, text string) *config.NICAffinityArgs {
	t.Helper()
	checkSchedulerConfig(t, text)
	obj, _, err := schedscheme.Codecs.UniversalDecoder().Decode([]byte(text), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, pc := range obj.(*schedconfig.KubeSchedulerConfiguration).Profiles[0].PluginConfig {
		if pc.Name == nicaffinity.Name {
			a, err := nicaffinity.ParseArgs(pc.Args)
			if err != nil {
				t.Fatal(err)
			}
			return a
		}
	}
	t.Fatal("no NICAffinity args")
	return nil
}
