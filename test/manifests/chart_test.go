package manifests

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"helm.sh/helm/v4/pkg/chart/common"
	chartvalues "helm.sh/helm/v4/pkg/chart/common/util"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	chartutil "helm.sh/helm/v4/pkg/chart/v2/util"
	"helm.sh/helm/v4/pkg/engine"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/nicaffinity/nicaffinity/internal/controlplane"
)

// chartDir is the Helm chart. Its templates are written by hand; with the
// default values they render what kustomize builds from manifests/
// (TestChartMatchesManifests), and its crds/ is a link to manifests/crds.
const chartDir = "../../charts/nicaffinity"

// The Kubernetes version the chart is rendered for: the one we build on.
const kubeVersion = "v1.37.2"

func loadChart(t *testing.T) *chart.Chart {
	t.Helper()
	c, err := loader.Load(chartDir)
	if err != nil {
		t.Fatalf("loading %s: %v", chartDir, err)
	}
	return c
}

// renderChart renders the chart as `helm install nicaffinity` would with
// the given values over values.yaml, values.schema.json checked. It
// returns the rendered objects' YAML documents, in a stable order.
func renderChart(t *testing.T, c *chart.Chart, vals map[string]any) ([][]byte, error) {
	t.Helper()
	kv, err := common.ParseKubeVersion(kubeVersion)
	if err != nil {
		t.Fatal(err)
	}
	caps := &common.Capabilities{KubeVersion: *kv, APIVersions: common.DefaultVersionSet}
	top, err := chartvalues.ToRenderValuesWithSchemaValidation(c, vals,
		common.ReleaseOptions{Name: "nicaffinity", Namespace: "nicaffinity-system", Revision: 1, IsInstall: true}, caps, false)
	if err != nil {
		return nil, err
	}
	files, err := engine.Render(c, top)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	var docs [][]byte
	for _, name := range names {
		if strings.HasSuffix(name, "NOTES.txt") {
			continue
		}
		docs = append(docs, splitYAML([]byte(files[name]))...)
	}
	return docs, nil
}

func mustRender(t *testing.T, c *chart.Chart, vals map[string]any) [][]byte {
	t.Helper()
	docs, err := renderChart(t, c, vals)
	if err != nil {
		t.Fatalf("rendering the chart with %v: %v", vals, err)
	}
	return docs
}

// helmOnly are what Helm adds and the manifests do not carry: Helm's
// labels, and the checksum that rolls the scheduler when its
// configuration changes.
var (
	helmLabels      = []string{"helm.sh/chart", "app.kubernetes.io/managed-by", "app.kubernetes.io/instance", "app.kubernetes.io/version"}
	helmAnnotations = []string{"checksum/config"}
)

// normalized maps each object to "Kind namespace/name", Helm's own labels
// and annotations removed and a ConfigMap's YAML files parsed (so that
// comments and layout do not count).
func normalized(t *testing.T, docs [][]byte) map[string]map[string]any {
	t.Helper()
	out := map[string]map[string]any{}
	for _, doc := range docs {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(doc, &u.Object); err != nil {
			t.Fatalf("%v\n%s", err, firstLines(doc))
		}
		for _, path := range [][]string{{"metadata"}, {"spec", "template", "metadata"}} {
			for _, field := range []struct {
				name string
				keys []string
			}{{"labels", helmLabels}, {"annotations", helmAnnotations}} {
				m, found, _ := unstructured.NestedStringMap(u.Object, append(path, field.name)...)
				if !found {
					continue
				}
				for _, k := range field.keys {
					delete(m, k)
				}
				if len(m) == 0 {
					unstructured.RemoveNestedField(u.Object, append(path, field.name)...)
				} else {
					_ = unstructured.SetNestedStringMap(u.Object, m, append(path, field.name)...)
				}
			}
		}
		if u.GetKind() == "ConfigMap" {
			data, _, _ := unstructured.NestedStringMap(u.Object, "data")
			parsed := map[string]any{}
			for k, v := range data {
				var x any
				if err := yaml.Unmarshal([]byte(v), &x); err != nil {
					t.Fatalf("ConfigMap %s key %s: %v", u.GetName(), k, err)
				}
				parsed[k] = x
			}
			u.Object["data"] = parsed
		}
		key := fmt.Sprintf("%s %s/%s", u.GetKind(), u.GetNamespace(), u.GetName())
		if _, dup := out[key]; dup {
			t.Errorf("%s rendered twice", key)
		}
		out[key] = u.Object
	}
	return out
}

// TestChartMatchesManifests: with its default values the chart installs
// exactly what kustomize builds from manifests/ (and, with the allocation
// proxy on, manifests/allocation-proxy too), and its CRD is the one of
// manifests/crds, installed by Helm and never deleted on uninstall.
func TestChartMatchesManifests(t *testing.T) {
	c := loadChart(t)
	for _, proxy := range []bool{false, true} {
		t.Run(fmt.Sprintf("allocationProxy.enabled=%v", proxy), func(t *testing.T) {
			want := kustomizeBuild(t)
			if proxy {
				want = append(want, kustomizeBuildDir(t, filepath.Join(manifestsDir, "allocation-proxy"))...)
			}
			got := mustRender(t, c, map[string]any{"allocationProxy": map[string]any{"enabled": proxy}})
			if diff := cmp.Diff(normalized(t, want), normalized(t, got)); diff != "" {
				t.Errorf("kustomize (-) and the chart (+) differ:\n%s", diff)
			}
		})
	}

	crds := c.CRDObjects()
	if len(crds) != 1 {
		t.Fatalf("the chart has %d CRDs, want the NodeResourceTopology CRD", len(crds))
	}
	want, err := os.ReadFile(filepath.Join(manifestsDir, "crds", "noderesourcetopologies.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(crds[0].File.Data, want) {
		t.Errorf("the chart's %s is not manifests/crds/noderesourcetopologies.yaml", crds[0].Name)
	}
	for _, doc := range mustRender(t, c, nil) {
		if bytes.Contains(doc, []byte("kind: CustomResourceDefinition")) {
			t.Errorf("a template renders a CRD: Helm would delete it on uninstall\n%s", firstLines(doc))
		}
	}

	// The version-skew policy: kube-scheduler 1.37 runs against an
	// apiserver of 1.37 or 1.38, never 1.36 (older) or 1.39.
	for v, want := range map[string]bool{kubeVersion: true, "v1.38.0": true, "v1.36.5": false, "v1.39.0": false} {
		if got := chartutil.IsCompatibleRange(c.Metadata.KubeVersion, v); got != want {
			t.Errorf("kubeVersion %q allows %s: %v, want %v (the scheduler is kube-scheduler 1.%d)", c.Metadata.KubeVersion, v, got, want, 37)
		}
	}
}

// TestChartInstalls renders the chart with sets of values users set and
// checks every object as TestManifests checks the manifests: strict
// decoding, the scheduler's configuration through kube-scheduler's
// validation and the plugin's args parser, and a server-side dry-run apply
// on a real apiserver (which compiles the admission policies' CEL).
func TestChartInstalls(t *testing.T) {
	c := loadChart(t)
	cp := controlplane.Start(t)
	dyn, mapper := dynamicClients(t, cp)
	dec := decoder(t)
	cases := []struct {
		name string
		vals map[string]any
		// wantKinds counts kinds the values add or remove.
		wantKinds map[string]int
		check     func(t *testing.T, objs map[string]map[string]any)
	}{{
		name:      "defaults",
		wantKinds: map[string]int{"DaemonSet": 1, "Deployment": 1, "ServiceMonitor": 0, "ValidatingAdmissionPolicy": 6},
	}, {
		// Rails by subnet need the host's network namespace.
		name: "rails by subnet",
		vals: map[string]any{"exporter": map[string]any{"railSource": "subnet"}},
		check: func(t *testing.T, objs map[string]map[string]any) {
			ds := objs["DaemonSet nicaffinity-node/topology-exporter"]
			spec, _ := ds["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
			if spec["hostNetwork"] != true || spec["dnsPolicy"] != "ClusterFirstWithHostNet" {
				t.Errorf("railSource=subnet: exporter hostNetwork %v, dnsPolicy %v; want true, ClusterFirstWithHostNet", spec["hostNetwork"], spec["dnsPolicy"])
			}
		},
	}, {
		name: "everything on, renamed and retuned",
		vals: map[string]any{
			"namespaces":       map[string]any{"scheduler": "gpu-sched", "node": "gpu-node"},
			"image":            map[string]any{"registry": "registry.example.com:5000/ai", "tag": "v0.37.1", "pullPolicy": "Always"},
			"imagePullSecrets": []any{map[string]any{"name": "regcred"}},
			"kubeletDir":       "/data/kubelet",
			"resourceNames":    map[string]any{"gpu": "nvidia.com/gpu", "rdmaPrefixes": []any{"rdma/", "infiniband/"}, "sriov": []any{"example.com/vf_a", "example.com/vf_b"}},
			"scheduler": map[string]any{
				"name": "gpu-scheduler", "replicas": 3, "logLevel": 4,
				"pluginArgs":   map[string]any{"defaultMaxLevel": "PIX", "annotateAt": "PreBind", "topologyMaxAge": "5m", "scoringStrategy": map[string]any{"type": "MostAligned"}},
				"nodeSelector": map[string]any{"node-role.kubernetes.io/control-plane": ""},
				"tolerations":  []any{map[string]any{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"}},
			},
			"exporter":        map[string]any{"runtimeClassName": "", "maxLevel": "PIX", "logLevel": 2, "kubeletConfigPath": ""},
			"allocationProxy": map[string]any{"enabled": true, "timeout": "500ms"},
			"serviceMonitor":  map[string]any{"enabled": true, "labels": map[string]any{"release": "kube-prometheus"}},
		},
		wantKinds: map[string]int{"DaemonSet": 2, "ServiceMonitor": 3, "Service": 3, "ClusterRole": 4},
		check: func(t *testing.T, objs map[string]map[string]any) {
			exporter := objs["DaemonSet gpu-node/topology-exporter"]
			if exporter == nil {
				t.Fatalf("no exporter in gpu-node: %v", keys(objs))
			}
			ctr := container(t, exporter)
			for _, want := range []string{"--rdma-prefixes=rdma/,infiniband/", "--sriov-resources=example.com/vf_a,example.com/vf_b", "--max-level=PIX", "--v=2"} {
				if !contains(ctr["args"], want) {
					t.Errorf("exporter args %v lack %s", ctr["args"], want)
				}
			}
			if ctr["image"] != "registry.example.com:5000/ai/topology-exporter:v0.37.1" || ctr["imagePullPolicy"] != "Always" {
				t.Errorf("exporter image %v, pull policy %v", ctr["image"], ctr["imagePullPolicy"])
			}
			if _, found, _ := unstructured.NestedString(exporter, "spec", "template", "spec", "runtimeClassName"); found {
				t.Error("runtimeClassName: \"\" still sets a runtime class")
			}
			vols, _, _ := unstructured.NestedSlice(exporter, "spec", "template", "spec", "volumes")
			if !strings.Contains(fmt.Sprint(vols), "path:/data/kubelet/pod-resources") {
				t.Errorf("kubeletDir not in the exporter's volumes: %v", vols)
			}
			policy := objs["ValidatingAdmissionPolicy /nicaffinity-exporter-own-topology"]
			if text := fmt.Sprint(policy); !strings.Contains(text, "system:serviceaccount:gpu-node:topology-exporter") {
				t.Errorf("the exporter's admission policy does not name the renamed namespace: %s", text)
			}
			lease := fmt.Sprint(objs["ValidatingAdmissionPolicy /nicaffinity-scheduler-own-lease"])
			if !strings.Contains(lease, `request.namespace == "gpu-sched"`) || !strings.Contains(lease, `request.name == "gpu-scheduler"`) {
				t.Errorf("the lease policy does not name gpu-sched/gpu-scheduler: %s", lease)
			}
			if objs["ClusterRole /nicaffinity-scheduler-prebind"] == nil {
				t.Error("annotateAt: PreBind without the pod patch role")
			}
		},
	}}
	ctx := context.Background()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			docs := mustRender(t, c, tc.vals)
			objs := normalized(t, docs)
			kinds := map[string]int{}
			var toApply []*unstructured.Unstructured
			for _, doc := range docs {
				u := &unstructured.Unstructured{}
				if err := yaml.Unmarshal(doc, &u.Object); err != nil {
					t.Fatal(err)
				}
				kinds[u.GetKind()]++
				if u.GetAPIVersion() == "monitoring.coreos.com/v1" {
					checkServiceMonitor(t, doc)
					continue // no Prometheus Operator CRDs on this apiserver
				}
				obj, _, err := dec.Decode(doc, nil, nil)
				if err != nil {
					t.Fatalf("decoding %s: %v", firstLines(doc), err)
				}
				if cm, ok := obj.(*corev1.ConfigMap); ok && cm.Name == "nicaffinity-scheduler-config" {
					checkSchedulerConfigNamed(t, cm.Data["scheduler-config.yaml"], schedulerName(tc.vals))
				}
				if ns, ok := obj.(*corev1.Namespace); ok {
					// A dry run needs the namespaces to exist.
					if _, err := cp.Kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
						t.Fatal(err)
					}
				}
				toApply = append(toApply, u)
			}
			for kind, n := range tc.wantKinds {
				if kinds[kind] != n {
					t.Errorf("%d %s objects, want %d (all: %v)", kinds[kind], kind, n, kinds)
				}
			}
			dryRunApply(t, dyn, mapper, toApply)
			if tc.check != nil {
				tc.check(t, objs)
			}
		})
	}
}

// TestChartSchemaRefuses: values.schema.json refuses bad values before
// anything renders, naming the value.
func TestChartSchemaRefuses(t *testing.T) {
	c := loadChart(t)
	for _, tc := range []struct {
		name string
		vals map[string]any
		want string
	}{
		{"unknown top-level key", map[string]any{"schedulr": map[string]any{}}, "schedulr"},
		{"misspelt plugin argument", map[string]any{"scheduler": map[string]any{"pluginArgs": map[string]any{"defaultMaxLvl": "PIX"}}}, "defaultMaxLvl"},
		{"unknown level", map[string]any{"scheduler": map[string]any{"pluginArgs": map[string]any{"defaultMaxLevel": "NV12"}}}, "/scheduler/pluginArgs/defaultMaxLevel"},
		{"unknown policy", map[string]any{"scheduler": map[string]any{"pluginArgs": map[string]any{"defaultPolicy": "always"}}}, "/scheduler/pluginArgs/defaultPolicy"},
		{"zero replicas", map[string]any{"scheduler": map[string]any{"replicas": 0}}, "/scheduler/replicas"},
		{"replicas as a string", map[string]any{"scheduler": map[string]any{"replicas": "2"}}, "/scheduler/replicas"},
		{"weight out of range", map[string]any{"scheduler": map[string]any{"pluginArgs": map[string]any{"scoringStrategy": map[string]any{"levelWeight": 101}}}}, "/scheduler/pluginArgs/scoringStrategy/levelWeight"},
		{"timeout not a duration", map[string]any{"scheduler": map[string]any{"pluginArgs": map[string]any{"reservationTimeout": "two minutes"}}}, "/scheduler/pluginArgs/reservationTimeout"},
		{"GPU resource without a domain", map[string]any{"resourceNames": map[string]any{"gpu": "gpu"}}, "/resourceNames/gpu"},
		{"RDMA prefix with a comma", map[string]any{"resourceNames": map[string]any{"rdmaPrefixes": []any{"rdma/,x/"}}}, "/resourceNames/rdmaPrefixes/0"},
		{"namespace not a DNS label", map[string]any{"namespaces": map[string]any{"node": "GPU_Nodes"}}, "/namespaces/node"},
		{"relative kubelet directory", map[string]any{"kubeletDir": "var/lib/kubelet"}, "/kubeletDir"},
		{"port out of range", map[string]any{"exporter": map[string]any{"metricsPort": 70000}}, "/exporter/metricsPort"},
		{"bad pull policy", map[string]any{"image": map[string]any{"pullPolicy": "Sometimes"}}, "/image/pullPolicy"},
		{"image tag with a space", map[string]any{"image": map[string]any{"tag": "v1 latest"}}, "/image/tag"},
		{"toleration with a bad operator", map[string]any{"exporter": map[string]any{"tolerations": []any{map[string]any{"key": "a", "operator": "In"}}}}, "/exporter/tolerations/0/operator"},
		{"proxy switch as a string", map[string]any{"allocationProxy": map[string]any{"enabled": "yes"}}, "/allocationProxy/enabled"},
		{"scrape interval not a duration", map[string]any{"serviceMonitor": map[string]any{"interval": "often"}}, "/serviceMonitor/interval"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := renderChart(t, c, tc.vals)
			if err == nil {
				t.Fatalf("values %v rendered; want them refused", tc.vals)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not name %s", err, tc.want)
			}
		})
	}
}

// TestChartSchemaAllowsWhatThePluginTakes: every value the schema enumerates
// for the plugin's arguments renders a configuration the plugin accepts.
func TestChartSchemaAllowsWhatThePluginTakes(t *testing.T) {
	c := loadChart(t)
	raw, err := os.ReadFile(filepath.Join(chartDir, "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	var schema struct {
		Properties struct {
			Scheduler struct {
				Properties struct {
					PluginArgs struct {
						Properties map[string]struct {
							Enum       []string `json:"enum"`
							Properties map[string]struct {
								Enum []string `json:"enum"`
							} `json:"properties"`
						} `json:"properties"`
					} `json:"pluginArgs"`
				} `json:"properties"`
			} `json:"scheduler"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(raw, &schema); err != nil {
		t.Fatal(err)
	}
	tried := 0
	for arg, p := range schema.Properties.Scheduler.Properties.PluginArgs.Properties {
		values := p.Enum
		for sub, sp := range p.Properties {
			for _, v := range sp.Enum {
				docs := mustRender(t, c, map[string]any{"scheduler": map[string]any{"pluginArgs": map[string]any{arg: map[string]any{sub: v}}}})
				checkRenderedConfig(t, docs)
				tried++
			}
		}
		for _, v := range values {
			docs := mustRender(t, c, map[string]any{"scheduler": map[string]any{"pluginArgs": map[string]any{arg: v}}})
			checkRenderedConfig(t, docs)
			tried++
		}
	}
	if tried < 12 {
		t.Errorf("tried %d enumerated values; the schema lost its enums", tried)
	}
}

func checkRenderedConfig(t *testing.T, docs [][]byte) {
	t.Helper()
	objs := normalized(t, docs)
	cm := objs["ConfigMap nicaffinity-system/nicaffinity-scheduler-config"]
	data, _ := cm["data"].(map[string]any)
	b, err := yaml.Marshal(data["scheduler-config.yaml"])
	if err != nil {
		t.Fatal(err)
	}
	checkSchedulerConfigNamed(t, string(b), "nicaffinity-scheduler")
}

// checkServiceMonitor decodes a ServiceMonitor strictly into the Prometheus
// Operator's own type and checks it selects one of our metrics Services.
func checkServiceMonitor(t *testing.T, doc []byte) {
	t.Helper()
	var sm monitoringv1.ServiceMonitor
	if err := yaml.UnmarshalStrict(doc, &sm); err != nil {
		t.Fatalf("ServiceMonitor: %v\n%s", err, doc)
	}
	if len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0].Port == "" || sm.Spec.Selector.MatchLabels["app.kubernetes.io/name"] == "" {
		t.Errorf("ServiceMonitor %s: endpoints %+v, selector %+v", sm.Name, sm.Spec.Endpoints, sm.Spec.Selector)
	}
	if sm.Labels["release"] != "kube-prometheus" {
		t.Errorf("ServiceMonitor %s lacks the labels of serviceMonitor.labels: %v", sm.Name, sm.Labels)
	}
}

func schedulerName(vals map[string]any) string {
	if s, ok := vals["scheduler"].(map[string]any); ok {
		if n, ok := s["name"].(string); ok {
			return n
		}
	}
	return "nicaffinity-scheduler"
}

func container(t *testing.T, obj map[string]any) map[string]any {
	t.Helper()
	cs, _, _ := unstructured.NestedSlice(obj, "spec", "template", "spec", "containers")
	if len(cs) != 1 {
		t.Fatalf("%d containers", len(cs))
	}
	return cs[0].(map[string]any)
}

func contains(list any, s string) bool {
	items, _ := list.([]any)
	for _, it := range items {
		if it == s {
			return true
		}
	}
	return false
}

func keys(m map[string]map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
