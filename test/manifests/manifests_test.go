package manifests

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	nrtv1alpha2 "github.com/k8stopologyawareschedwg/noderesourcetopology-api/pkg/apis/topology/v1alpha2"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/restmapper"
	schedconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	schedscheme "k8s.io/kubernetes/pkg/scheduler/apis/config/scheme"
	schedvalidation "k8s.io/kubernetes/pkg/scheduler/apis/config/validation"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/nicaffinity/nicaffinity/internal/controlplane"
	"github.com/nicaffinity/nicaffinity/pkg/plugins/nicaffinity"
)

// manifestsDir is the repository's manifests/. This package stays apart from
// test/integration: kustomize imports Go's plugin package, whose linking
// mode makes go-nvml's lazily bound symbols fail at load.
const manifestsDir = "../../manifests"

// decoder knows every kind we ship: built-in types, CRDs, NodeResourceTopology.
func decoder(t *testing.T) runtime.Decoder {
	t.Helper()
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(apiextensionsv1.AddToScheme(s))
	utilruntime.Must(nrtv1alpha2.AddToScheme(s))
	return serializer.NewCodecFactory(s, serializer.EnableStrict).UniversalDeserializer()
}

// kustomizeBuild renders manifests/ as `kubectl apply -k manifests/` would.
func kustomizeBuild(t *testing.T) [][]byte { return kustomizeBuildDir(t, manifestsDir) }

func kustomizeBuildDir(t *testing.T, dir string) [][]byte {
	t.Helper()
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	var docs [][]byte
	for _, r := range m.Resources() {
		b, err := r.AsYAML()
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, b)
	}
	return docs
}

func splitYAML(b []byte) [][]byte {
	var out [][]byte
	for _, doc := range strings.Split(string(b), "\n---") {
		if strings.TrimSpace(stripComments(doc)) != "" {
			out = append(out, []byte(doc))
		}
	}
	return out
}

func stripComments(s string) string {
	var lines []string
	for _, l := range strings.Split(s, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines, "\n")
}

// TestManifests decodes every manifest with the real schemes, checks the
// scheduler configuration with the scheduler's own validation and the
// plugin's args parser, and applies everything with server-side dry-run to a
// real apiserver (examples of foreign CRDs are checked for structure).
func TestManifests(t *testing.T) {
	dec := decoder(t)
	installed := kustomizeBuild(t)
	if len(installed) < 10 {
		t.Fatalf("kustomize built only %d objects", len(installed))
	}
	// The allocation proxy installs on its own, after manifests/.
	proxy := kustomizeBuildDir(t, filepath.Join(manifestsDir, "allocation-proxy"))
	if len(proxy) != 4 {
		t.Fatalf("manifests/allocation-proxy builds %d objects, want a ServiceAccount, ClusterRole, binding and DaemonSet", len(proxy))
	}
	installed = append(installed, proxy...)
	var objs []runtime.Object
	for _, doc := range installed {
		obj, gvk, err := dec.Decode(doc, nil, nil)
		if err != nil {
			t.Fatalf("decoding %s: %v", firstLines(doc), err)
		}
		objs = append(objs, obj)
		if cm, ok := obj.(*corev1.ConfigMap); ok && cm.Name == "nicaffinity-scheduler-config" {
			checkSchedulerConfig(t, cm.Data["scheduler-config.yaml"])
		}
		_ = gvk
	}
	examples, err := filepath.Glob(filepath.Join(manifestsDir, "examples", "*.yaml"))
	if err != nil || len(examples) < 5 {
		t.Fatalf("want 5 examples (IB, RoCE hostNetwork, RoCE MacVLAN, SR-IOV, NicClusterPolicy), got %v", examples)
	}
	var foreign []*unstructured.Unstructured
	pods := 0
	for _, path := range examples {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range splitYAML(b) {
			u := &unstructured.Unstructured{}
			if err := yaml.Unmarshal(doc, &u.Object); err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			switch u.GetAPIVersion() {
			case "v1":
				obj, _, err := dec.Decode(doc, nil, nil)
				if err != nil {
					t.Fatalf("%s: %v", path, err)
				}
				pod, ok := obj.(*corev1.Pod)
				if !ok {
					t.Fatalf("%s: unexpected %T", path, obj)
				}
				checkExamplePod(t, path, pod)
				objs = append(objs, obj)
				pods++
			default:
				checkForeign(t, path, u)
				foreign = append(foreign, u)
			}
		}
	}
	if pods != 4 {
		t.Errorf("want an example pod for each of IB, RoCE hostNetwork, RoCE MacVLAN, SR-IOV; got %d", pods)
	}
	if len(foreign) != 12 {
		t.Errorf("want 12 Network Operator / SR-IOV objects, got %d", len(foreign))
	}
	checkMacvlanRoutes(t, objs, foreign)

	cp := controlplane.Start(t)
	dyn, mapper := dynamicClients(t, cp)
	ctx := context.Background()
	// Namespaced objects need their namespace to exist for a dry run.
	for _, ns := range []string{"nicaffinity-system", "nicaffinity-node"} {
		if _, err := cp.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var us []*unstructured.Unstructured
	for _, obj := range objs {
		u := &unstructured.Unstructured{}
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
		if err != nil {
			t.Fatal(err)
		}
		u.Object = m
		if u.GetKind() == "" {
			gvks, _, _ := clientgoscheme.Scheme.ObjectKinds(obj)
			if len(gvks) > 0 {
				u.SetGroupVersionKind(gvks[0])
			}
		}
		us = append(us, u)
	}
	dryRunApply(t, dyn, mapper, us)
}

// dryRunApply applies each object with server-side dry-run: the apiserver
// defaults, validates and admits it as for a real install.
func dryRunApply(t *testing.T, dyn dynamic.Interface, mapper meta.RESTMapper, objs []*unstructured.Unstructured) {
	t.Helper()
	ctx := context.Background()
	for _, u := range objs {
		gvk := u.GroupVersionKind()
		mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			t.Fatalf("%s %s: %v", gvk, u.GetName(), err)
		}
		var ri dynamic.ResourceInterface = dyn.Resource(mapping.Resource)
		if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
			ri = dyn.Resource(mapping.Resource).Namespace(u.GetNamespace())
		}
		body, _ := json.Marshal(u.Object)
		force := true
		if _, err := ri.Patch(ctx, u.GetName(), types.ApplyPatchType, body, metav1.PatchOptions{
			FieldManager: "manifest-test", DryRun: []string{metav1.DryRunAll}, Force: &force}); err != nil {
			t.Errorf("server-side dry-run apply of %s %s/%s: %v", gvk.Kind, u.GetNamespace(), u.GetName(), err)
		}
	}
}

// dynamicClients are a JSON dynamic client and a discovery REST mapper of cp.
func dynamicClients(t *testing.T, cp *controlplane.ControlPlane) (dynamic.Interface, meta.RESTMapper) {
	t.Helper()
	dyn, err := dynamic.NewForConfig(controlplane.JSONConfig(cp.Config))
	if err != nil {
		t.Fatal(err)
	}
	disco, err := discovery.NewDiscoveryClientForConfig(cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	return dyn, restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disco))
}

func firstLines(b []byte) string {
	s := string(b)
	if len(s) > 200 {
		s = s[:200]
	}
	return s
}

func checkSchedulerConfig(t *testing.T, text string) {
	t.Helper()
	checkSchedulerConfigNamed(t, text, "nicaffinity-scheduler")
}

// checkSchedulerConfigNamed validates a KubeSchedulerConfiguration with
// kube-scheduler's own validation and the plugin's args with its parser;
// its profile and lease are named name.
func checkSchedulerConfigNamed(t *testing.T, text, name string) {
	t.Helper()
	obj, _, err := schedscheme.Codecs.UniversalDecoder().Decode([]byte(text), nil, nil)
	if err != nil {
		t.Fatalf("scheduler configuration: %v", err)
	}
	cfg, ok := obj.(*schedconfig.KubeSchedulerConfiguration)
	if !ok {
		t.Fatalf("scheduler configuration decodes to %T", obj)
	}
	if err := schedvalidation.ValidateKubeSchedulerConfiguration(cfg); err != nil {
		t.Errorf("scheduler configuration is invalid: %v", err)
	}
	if !cfg.LeaderElection.LeaderElect || cfg.LeaderElection.ResourceName != name {
		t.Errorf("leader election %+v: want it on with lease %s", cfg.LeaderElection, name)
	}
	if len(cfg.Profiles) != 1 || cfg.Profiles[0].SchedulerName != name {
		t.Fatalf("profiles %+v", cfg.Profiles)
	}
	for _, pc := range cfg.Profiles[0].PluginConfig {
		if pc.Name == nicaffinity.Name {
			if _, err := nicaffinity.ParseArgs(pc.Args); err != nil {
				t.Errorf("plugin args: %v", err)
			}
			return
		}
	}
	t.Errorf("no pluginConfig for %s", nicaffinity.Name)
}

func checkExamplePod(t *testing.T, path string, pod *corev1.Pod) {
	t.Helper()
	if pod.Spec.SchedulerName != "nicaffinity-scheduler" {
		t.Errorf("%s: schedulerName %q", path, pod.Spec.SchedulerName)
	}
	c := pod.Spec.Containers[0]
	gpus := c.Resources.Limits["nvidia.com/gpu"]
	if gpus.Value() <= 0 || gpus.Value() >= 8 {
		t.Errorf("%s: %d GPUs, want fewer than 8", path, gpus.Value())
	}
	rdma := false
	for name := range c.Resources.Limits {
		rdma = rdma || strings.HasPrefix(string(name), "rdma/") || name == "openshift.io/sriov_highnet"
	}
	if !rdma {
		t.Errorf("%s: requests no RDMA resource", path)
	}
	caps := c.SecurityContext.Capabilities
	if caps == nil || len(caps.Add) == 0 || caps.Add[0] != "IPC_LOCK" {
		t.Errorf("%s: no IPC_LOCK", path)
	}
	shm := false
	for _, m := range c.VolumeMounts {
		shm = shm || m.MountPath == "/dev/shm"
	}
	nccl := false
	for _, e := range c.Env {
		nccl = nccl || strings.HasPrefix(e.Name, "NCCL_")
	}
	if !shm || !nccl {
		t.Errorf("%s: /dev/shm %v, NCCL variables %v", path, shm, nccl)
	}
}

// checkForeign checks objects of CRDs we do not install for the fields their
// operators need.
func checkForeign(t *testing.T, path string, u *unstructured.Unstructured) {
	t.Helper()
	need := map[string][][]string{
		"mellanox.com/v1alpha1/NicClusterPolicy":              {{"spec", "rdmaSharedDevicePlugin", "config"}},
		"mellanox.com/v1alpha1/MacvlanNetwork":                {{"spec", "master"}, {"spec", "ipam"}, {"spec", "networkNamespace"}},
		"mellanox.com/v1alpha1/IPPool":                        {{"spec", "subnet"}, {"spec", "perNodeBlockSize"}},
		"sriovnetwork.openshift.io/v1/SriovNetworkNodePolicy": {{"spec", "resourceName"}, {"spec", "numVfs"}, {"spec", "nicSelector"}, {"spec", "isRdma"}},
		"sriovnetwork.openshift.io/v1/SriovNetwork":           {{"spec", "resourceName"}, {"spec", "networkNamespace"}},
	}
	key := u.GetAPIVersion() + "/" + u.GetKind()
	fields, known := need[key]
	if !known {
		t.Errorf("%s: unexpected kind %s", path, key)
		return
	}
	if u.GetName() == "" {
		t.Errorf("%s: %s without a name", path, key)
	}
	for _, f := range fields {
		if _, found, err := unstructured.NestedFieldNoCopy(u.Object, f...); !found || err != nil {
			t.Errorf("%s: %s lacks %s", path, key, strings.Join(f, "."))
		}
	}
	if key == "sriovnetwork.openshift.io/v1/SriovNetworkNodePolicy" {
		if rdma, _, _ := unstructured.NestedBool(u.Object, "spec", "isRdma"); !rdma {
			t.Errorf("%s: isRdma is not true", path)
		}
	}
	if key == "mellanox.com/v1alpha1/NicClusterPolicy" {
		cfg, _, _ := unstructured.NestedString(u.Object, "spec", "rdmaSharedDevicePlugin", "config")
		var parsed struct {
			ConfigList []struct {
				ResourceName string `json:"resourceName"`
			} `json:"configList"`
		}
		if err := json.Unmarshal([]byte(cfg), &parsed); err != nil || len(parsed.ConfigList) == 0 || parsed.ConfigList[0].ResourceName == "" {
			t.Errorf("%s: rdmaSharedDevicePlugin.config is not a config list with a resourceName: %v", path, err)
		}
	}
	for _, f := range [][]string{{"spec", "ipam"}} {
		if s, found, _ := unstructured.NestedString(u.Object, f...); found && !json.Valid([]byte(s)) {
			t.Errorf("%s: %s %s is not JSON", path, key, strings.Join(f, "."))
		}
	}
}

// checkMacvlanRoutes: a MacVLAN interface rides one PF, so the MacVLAN
// example's pod must join one network per PF (distinct masters), or a plan
// naming another NIC has no RoCE route.
func checkMacvlanRoutes(t *testing.T, objs []runtime.Object, foreign []*unstructured.Unstructured) {
	t.Helper()
	var nets []string
	masters := map[string]bool{}
	for _, u := range foreign {
		if u.GetKind() != "MacvlanNetwork" {
			continue
		}
		master, _, _ := unstructured.NestedString(u.Object, "spec", "master")
		if masters[master] {
			t.Errorf("MacvlanNetwork %s: master %s is another network's too", u.GetName(), master)
		}
		masters[master] = true
		nets = append(nets, u.GetName())
	}
	for _, obj := range objs {
		pod, ok := obj.(*corev1.Pod)
		if !ok || pod.Annotations["k8s.v1.cni.cncf.io/networks"] == "" || len(nets) == 0 {
			continue
		}
		got := strings.Split(pod.Annotations["k8s.v1.cni.cncf.io/networks"], ",")
		if diff := cmp.Diff(nets, got); diff != "" {
			t.Errorf("pod %s must join every MacVLAN network (-want,+got):\n%s", pod.Name, diff)
		}
		return
	}
	t.Errorf("no example pod joins the MacVLAN networks %v", nets)
}
