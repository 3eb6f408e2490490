// Package compat checks that scheduler-plugins' NodeResourceTopologyMatch,
// as released and unmodified, answers the same on the object nicaffinity's
// exporter publishes as on the one the Resource Topology Exporter publishes
// for the same node: nicaffinity's GPU, switch and NIC zones beside the
// Node zones change none of its Filter or Score answers.
package compat

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	topologyv1alpha2 "github.com/k8stopologyawareschedwg/noderesourcetopology-api/pkg/apis/topology/v1alpha2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	fwk "k8s.io/kube-scheduler/framework"
	schedconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"sigs.k8s.io/yaml"

	apiconfig "sigs.k8s.io/scheduler-plugins/apis/config"
	"sigs.k8s.io/scheduler-plugins/pkg/noderesourcetopology"
)

// machine is a fixture machine (testdata/README.md gives its state) and
// the Filter verdict expected, worked out by hand, per pod and scope.
type machine struct {
	name        string
	allocatable corev1.ResourceList
	// pass lists the pods that pass Filter, per scope.
	pass map[string][]string
}

var machines = []machine{
	{
		name:        "hgx-h100",
		allocatable: corev1.ResourceList{"cpu": resource.MustParse("191"), "memory": resource.MustParse("500Gi"), "nvidia.com/gpu": resource.MustParse("8")},
		pass: map[string][]string{
			// one-gpu, two-gpu and big-cpu fit NUMA 1 (3 GPUs, 86 CPUs,
			// 234 GiB); the containers of two-containers fit NUMA 0 then
			// NUMA 1, while the pod as a whole (4 GPUs) fits neither.
			"container": {"one-gpu", "two-gpu", "big-cpu", "two-containers", "best-effort", "burstable", "cpu-only"},
			"pod":       {"one-gpu", "two-gpu", "big-cpu", "best-effort", "burstable", "cpu-only"},
		},
	},
	{
		name:        "dgx-a100",
		allocatable: corev1.ResourceList{"cpu": resource.MustParse("255"), "memory": resource.MustParse("1008Gi"), "nvidia.com/gpu": resource.MustParse("8")},
		pass: map[string][]string{
			// No NUMA node has more than 2 GPUs or 32 CPUs.
			"container": {"one-gpu", "two-gpu", "best-effort", "burstable", "cpu-only"},
			"pod":       {"one-gpu", "two-gpu", "best-effort", "burstable", "cpu-only"},
		},
	},
}

type ctr struct {
	gpus, cpus int64
	mem        string
	// burstable: a CPU request without limits.
	burstable bool
}

// pods are Guaranteed unless said otherwise.
var pods = []struct {
	name       string
	containers []ctr
}{
	{"one-gpu", []ctr{{gpus: 1, cpus: 8, mem: "32Gi"}}},
	{"two-gpu", []ctr{{gpus: 2, cpus: 8, mem: "32Gi"}}},
	{"four-gpu", []ctr{{gpus: 4, cpus: 8, mem: "32Gi"}}},
	{"big-cpu", []ctr{{gpus: 1, cpus: 40, mem: "100Gi"}}},
	{"cpu-short", []ctr{{gpus: 3, cpus: 90, mem: "64Gi"}}},
	{"two-containers", []ctr{{gpus: 1, cpus: 30, mem: "16Gi"}, {gpus: 3, cpus: 50, mem: "16Gi"}}},
	{"memory-short", []ctr{{gpus: 1, cpus: 4, mem: "240Gi"}}},
	{"best-effort", []ctr{{}}},
	{"burstable", []ctr{{gpus: 1, cpus: 2, burstable: true}}},
	{"burstable-four-gpu", []ctr{{gpus: 4, cpus: 2, burstable: true}}},
	{"cpu-only", []ctr{{cpus: 16, mem: "16Gi"}}},
}

func makePod(name string, containers []ctr) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name)}}
	for i, c := range containers {
		rl := corev1.ResourceList{}
		if c.gpus > 0 {
			rl["nvidia.com/gpu"] = *resource.NewQuantity(c.gpus, resource.DecimalSI)
		}
		if c.cpus > 0 {
			rl["cpu"] = *resource.NewQuantity(c.cpus, resource.DecimalSI)
		}
		if c.mem != "" {
			rl["memory"] = resource.MustParse(c.mem)
		}
		r := corev1.ResourceRequirements{Requests: rl, Limits: rl}
		if c.burstable {
			r.Limits = corev1.ResourceList{"nvidia.com/gpu": rl["nvidia.com/gpu"]}
		}
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: fmt.Sprintf("c%d", i), Resources: r})
	}
	return p
}

// handle gives the plugin a kubeconfig; New uses nothing else of it with
// the passthrough cache (cacheResyncPeriodSeconds 0).
type handle struct {
	framework.Handle
	cfg *rest.Config
}

func (h handle) KubeConfig() *rest.Config { return h.cfg }

// apiserver serves discovery and GET of NodeResourceTopology objects: the
// plugin reads them through a controller-runtime client.
func apiserver(t *testing.T, objs map[string]*topologyv1alpha2.NodeResourceTopology) *rest.Config {
	t.Helper()
	gv := topologyv1alpha2.SchemeGroupVersion
	reply := func(w http.ResponseWriter, v any) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(v)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/api", func(w http.ResponseWriter, r *http.Request) {
		reply(w, &metav1.APIVersions{TypeMeta: metav1.TypeMeta{Kind: "APIVersions"}, Versions: []string{"v1"}})
	})
	mux.HandleFunc("/apis", func(w http.ResponseWriter, r *http.Request) {
		v := metav1.GroupVersionForDiscovery{GroupVersion: gv.String(), Version: gv.Version}
		reply(w, &metav1.APIGroupList{TypeMeta: metav1.TypeMeta{Kind: "APIGroupList", APIVersion: "v1"},
			Groups: []metav1.APIGroup{{Name: gv.Group, Versions: []metav1.GroupVersionForDiscovery{v}, PreferredVersion: v}}})
	})
	mux.HandleFunc("/apis/"+gv.String(), func(w http.ResponseWriter, r *http.Request) {
		reply(w, &metav1.APIResourceList{TypeMeta: metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"}, GroupVersion: gv.String(),
			APIResources: []metav1.APIResource{{Name: "noderesourcetopologies", SingularName: "noderesourcetopology", Kind: "NodeResourceTopology", Verbs: metav1.Verbs{"get", "list", "watch"}}}})
	})
	mux.HandleFunc("/apis/"+gv.String()+"/noderesourcetopologies/{name}", func(w http.ResponseWriter, r *http.Request) {
		obj, ok := objs[r.PathValue("name")]
		if !ok {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			_ = json.NewEncoder(w).Encode(&metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure, Reason: metav1.StatusReasonNotFound, Code: http.StatusNotFound})
			return
		}
		reply(w, obj)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	// No client-side rate limit: every Filter and Score reads the object.
	return &rest.Config{Host: srv.URL, QPS: -1}
}

func load(t *testing.T, file, name, scope string) *topologyv1alpha2.NodeResourceTopology {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", file))
	if err != nil {
		t.Fatal(err)
	}
	obj := &topologyv1alpha2.NodeResourceTopology{}
	if err := yaml.UnmarshalStrict(b, obj); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	obj.TypeMeta = metav1.TypeMeta{APIVersion: topologyv1alpha2.SchemeGroupVersion.String(), Kind: "NodeResourceTopology"}
	obj.Name = name
	if strings.HasSuffix(file, ".rte.yaml") {
		obj.Attributes = topologyv1alpha2.AttributeList{{Name: "topologyManagerScope", Value: scope}, {Name: "topologyManagerPolicy", Value: "single-numa-node"}}
	}
	return obj
}

var strategies = []apiconfig.ScoringStrategyType{apiconfig.LeastAllocated, apiconfig.MostAllocated, apiconfig.BalancedAllocation, apiconfig.LeastNUMANodes}

func TestNodeResourceTopologyMatchAgrees(t *testing.T) {
	ctx := context.Background()
	for _, m := range machines {
		for _, scope := range []string{"container", "pod"} {
			t.Run(m.name+"/"+scope, func(t *testing.T) {
				ours, rte := m.name+"-nicaffinity", m.name+"-rte"
				objs := map[string]*topologyv1alpha2.NodeResourceTopology{
					ours: load(t, fmt.Sprintf("%s-%s.nicaffinity.yaml", m.name, scope), ours, scope),
					rte:  load(t, m.name+".rte.yaml", rte, scope),
				}
				// The object says what scope it was published for.
				for _, a := range objs[ours].Attributes {
					if a.Name == "topologyManagerScope" && a.Value != scope {
						t.Fatalf("%s publishes scope %q, want %q", ours, a.Value, scope)
					}
				}
				h := handle{cfg: apiserver(t, objs)}
				nodeInfo := func(name string) fwk.NodeInfo {
					ni := framework.NewNodeInfo()
					ni.SetNode(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{Capacity: m.allocatable, Allocatable: m.allocatable}})
					return ni
				}
				for _, strategy := range strategies {
					args := &apiconfig.NodeResourceTopologyMatchArgs{ScoringStrategy: apiconfig.ScoringStrategy{Type: strategy,
						Resources: []schedconfig.ResourceSpec{{Name: "cpu", Weight: 1}, {Name: "memory", Weight: 1}, {Name: "nvidia.com/gpu", Weight: 1}}}}
					pl, err := noderesourcetopology.New(ctx, args, h)
					if err != nil {
						t.Fatal(err)
					}
					tm := pl.(*noderesourcetopology.TopologyMatch)
					var passed []string
					for _, p := range pods {
						pod := makePod(p.name, p.containers)
						fOurs := tm.Filter(ctx, framework.NewCycleState(), pod, nodeInfo(ours))
						fRTE := tm.Filter(ctx, framework.NewCycleState(), pod, nodeInfo(rte))
						if fOurs.Code() != fRTE.Code() || fOurs.Message() != fRTE.Message() {
							t.Errorf("%s %s: Filter on nicaffinity's object %v %q, on the Resource Topology Exporter's %v %q",
								strategy, p.name, fOurs.Code(), fOurs.Message(), fRTE.Code(), fRTE.Message())
						}
						if fOurs.IsSuccess() {
							passed = append(passed, p.name)
						}
						sOurs, stOurs := tm.Score(ctx, framework.NewCycleState(), pod, nodeInfo(ours))
						sRTE, stRTE := tm.Score(ctx, framework.NewCycleState(), pod, nodeInfo(rte))
						if sOurs != sRTE || stOurs.Code() != stRTE.Code() {
							t.Errorf("%s %s: Score on nicaffinity's object %d (%v), on the Resource Topology Exporter's %d (%v)", strategy, p.name, sOurs, stOurs, sRTE, stRTE)
						}
						t.Logf("%s %s: Filter %v, Score %d", strategy, p.name, fOurs.Code(), sOurs)
					}
					if strings.Join(passed, ",") != strings.Join(m.pass[scope], ",") {
						t.Errorf("%s: pods that pass Filter %v, want %v", strategy, passed, m.pass[scope])
					}
				}
			})
		}
	}
}
