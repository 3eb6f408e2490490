package doctor

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/k8stopologyawareschedwg/noderesourcetopology-api/pkg/apis/topology/v1alpha2"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/nicaffinity/nicaffinity/pkg/annotations"
	"github.com/nicaffinity/nicaffinity/pkg/nccllog"
	"github.com/nicaffinity/nicaffinity/pkg/nrt"
	"github.com/nicaffinity/nicaffinity/pkg/nrt/nrttest"
)

var now = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func gpuNode(name string, extra ...string) corev1.Node {
	alloc := corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("8")}
	for _, r := range extra {
		alloc[corev1.ResourceName(r)] = resource.MustParse("1k")
	}
	return corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{Allocatable: alloc}}
}

func freshObject(name string, at time.Time) *v1alpha2.NodeResourceTopology {
	o := nrttest.HalfNICs(name, 0, 1, 2, 3)
	o.Attributes = append(o.Attributes, v1alpha2.AttributeInfo{Name: nrt.AttrHeartbeat, Value: at.Format(time.RFC3339)})
	o.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: nrt.ExporterFieldManager}}
	return o
}

// healthy is a cluster where every check passes.
func healthy() ClusterState {
	return ClusterState{
		Now: now, CRD: true, PodGroupAPI: true, Nodes: []corev1.Node{gpuNode("a", "rdma/hca")},
		NRTs:      map[string]*v1alpha2.NodeResourceTopology{"a": freshObject("a", now.Add(-time.Minute))},
		NRTErrors: map[string]error{},
		Exporter:  &appsv1.DaemonSet{Status: appsv1.DaemonSetStatus{DesiredNumberScheduled: 1, NumberReady: 1}},
		Lease: &coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("sched-0"), LeaseDurationSeconds: ptr.To[int32](15),
			RenewTime: &metav1.MicroTime{Time: now.Add(-5 * time.Second)}}},
	}
}

func TestCluster(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*ClusterState)
		layer  string
		check  string
		detail string
	}{
		{name: "healthy", mutate: func(*ClusterState) {}},
		{name: "no CRD", mutate: func(s *ClusterState) { s.CRD = false }, layer: LayerInstall, check: "NodeResourceTopology CRD", detail: "not served"},
		{name: "no RDMA resource", mutate: func(s *ClusterState) { s.Nodes = []corev1.Node{gpuNode("a")} }, layer: LayerResources, check: "node a", detail: "no allocatable RDMA resource"},
		{name: "an SR-IOV resource counts", mutate: func(s *ClusterState) { s.Nodes = []corev1.Node{gpuNode("a", "openshift.io/sriov_highnet")} }},
		{name: "exporter pods not ready", mutate: func(s *ClusterState) { s.Exporter.Status.NumberReady = 0 }, layer: LayerExporter, check: "exporter DaemonSet", detail: "0 of 1 pods ready"},
		{name: "no object", mutate: func(s *ClusterState) { delete(s.NRTs, "a") }, layer: LayerExporter, check: "object of a", detail: "no NodeResourceTopology"},
		{name: "stale object", mutate: func(s *ClusterState) { s.NRTs["a"] = freshObject("a", now.Add(-time.Hour)) }, layer: LayerExporter, check: "object of a", detail: "stale: last written 1h0m0s ago (max 5m0s)"},
		{name: "another writer's object", mutate: func(s *ClusterState) {
			s.NRTs["a"].ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "node-feature-discovery-topology-updater"}}
		}, layer: LayerExporter, check: "object of a", detail: `written by "node-feature-discovery-topology-updater"`},
		{name: "unreadable object", mutate: func(s *ClusterState) { delete(s.NRTs, "a"); s.NRTErrors["a"] = errors.New("zone 3 is not an object") }, layer: LayerExporter, check: "object of a", detail: "cannot be read: zone 3"},
		{name: "GPUDirect impossible on the node", mutate: func(s *ClusterState) {
			s.NRTs["a"].Attributes = append(s.NRTs["a"].Attributes, v1alpha2.AttributeInfo{Name: nrt.AttrPeerMem, Value: "absent"}, v1alpha2.AttributeInfo{Name: nrt.AttrDMABuf, Value: "no"})
		}, layer: LayerExporter, check: "object of a", detail: "GPUDirect RDMA cannot run: nvidia-peermem not loaded"},
		{name: "no lease", mutate: func(s *ClusterState) { s.Lease = nil }, layer: LayerScheduler, check: "scheduler leader", detail: "no lease nicaffinity-system/nicaffinity-scheduler"},
		{name: "lease not renewed", mutate: func(s *ClusterState) { s.Lease.Spec.RenewTime = &metav1.MicroTime{Time: now.Add(-time.Minute)} }, layer: LayerScheduler, check: "scheduler leader", detail: "has not renewed it"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := healthy()
			tc.mutate(&s)
			r := Cluster(s, DefaultClusterOptions())
			if r.FailedLayer != tc.layer {
				t.Fatalf("failed layer %q, want %q: %+v", r.FailedLayer, tc.layer, r.Checks)
			}
			if tc.layer == "" {
				return
			}
			c := find(r, tc.layer, tc.check)
			if c == nil || c.Status != Fail || !strings.Contains(c.Detail, tc.detail) || c.Fix == "" {
				t.Errorf("check %q = %+v, want a failure with %q and a fix", tc.check, c, tc.detail)
			}
		})
	}
}

func TestPod(t *testing.T) {
	base := func() *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "train", Namespace: "ml", Annotations: map[string]string{
				annotations.ObservedKey: `{"gpus":[{"busID":"0000:32:00.0","nic":"mlx5_0","level":"PIX"}],"nics":["mlx5_0"],"level":"PIX","aligned":true,"plan":"matched"}`,
			}},
			Spec: corev1.PodSpec{NodeName: "a", SchedulerName: "nicaffinity-scheduler", Containers: []corev1.Container{{
				Name: "c", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1"), "rdma/hca": resource.MustParse("1")}},
				SecurityContext: &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"IPC_LOCK"}}},
			}}},
		}
	}
	roce := nrttest.HalfNICs("a", 0, 1)
	for i := range roce.Zones {
		if roce.Zones[i].Type == nrt.ZoneNIC {
			roce.Zones[i].Attributes = append(roce.Zones[i].Attributes, v1alpha2.AttributeInfo{Name: nrt.AttrLinkLayer, Value: "Ethernet"})
		}
	}
	tests := []struct {
		name   string
		mutate func(*corev1.Pod)
		obj    *v1alpha2.NodeResourceTopology
		layer  string
		check  string
		status Status
		detail string
	}{
		{name: "all good", mutate: func(*corev1.Pod) {}, check: "NCCL_IB_HCA", status: Info, detail: "mlx5_0"},
		{name: "pending", mutate: func(p *corev1.Pod) {
			p.Spec.NodeName = ""
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Message: "0/3 nodes are available: 3 none of the 2 free GPUs has a NIC at PXB or closer."}}
		}, layer: LayerPlacement, check: "scheduled", status: Fail, detail: "3 none of the 2 free GPUs"},
		{name: "default scheduler", mutate: func(p *corev1.Pod) { p.Spec.SchedulerName = "" }, check: "scheduler", status: Warn, detail: `"default-scheduler" placed it`},
		{name: "not aligned", mutate: func(p *corev1.Pod) {
			p.Annotations[annotations.ObservedKey] = `{"gpus":[{"busID":"0000:12:00.0","nic":"mlx5_0","level":"PHB"}],"nics":["mlx5_0"],"level":"PHB","aligned":false,"plan":"differs"}`
		}, layer: LayerDevices, check: "GPU-NIC alignment", status: Fail, detail: "worst PHB"},
		{name: "blocked by ACS", mutate: func(p *corev1.Pod) {
			p.Annotations[annotations.ObservedKey] = `{"gpus":[{"busID":"0000:32:00.0","nic":"mlx5_0","level":"PIX"}],"nics":["mlx5_0"],"level":"PIX","aligned":false,"gpudirect":["ACS redirect on 0000:31:00.0"],"plan":"matched"}`
		}, layer: LayerDevices, check: "GPU-NIC alignment", status: Fail, detail: "GPUDirect RDMA impossible: ACS redirect on 0000:31:00.0"},
		{name: "NCCL_IB_HCA leaves a NIC out", mutate: func(p *corev1.Pod) {
			p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "NCCL_IB_HCA", Value: "=mlx5_1:1"}}
		}, check: "NCCL_IB_HCA", status: Warn, detail: `the pod sets "=mlx5_1:1"`},
		{name: "NCCL_IB_HCA prefix covers it", mutate: func(p *corev1.Pod) {
			p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "NCCL_IB_HCA", Value: "mlx5"}}
		}, check: "NCCL_IB_HCA", status: Info, detail: "mlx5_0"},
		{name: "NCCL_IB_HCA prefix selects another NIC", mutate: func(p *corev1.Pod) {
			p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "NCCL_IB_HCA", Value: "mlx5"}}
		}, obj: nrttest.HalfNICs("a", 0, 1), check: "NCCL_IB_HCA", status: Warn, detail: `which NCCL reads as prefixes: it also selects mlx5_1`},
		{name: "NCCL_IB_HCA exact form", mutate: func(p *corev1.Pod) {
			p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "NCCL_IB_HCA", Value: "=mlx5_0:1"}}
		}, obj: nrttest.HalfNICs("a", 0, 1), check: "NCCL_IB_HCA", status: Info, detail: "mlx5_0"},
		{name: "RoCE without hostNetwork or MacVLAN", mutate: func(*corev1.Pod) {}, obj: roce, layer: LayerNetwork, check: "RoCE networking", status: Fail, detail: "neither hostNetwork nor a MacVLAN/SR-IOV network"},
		{name: "RoCE with hostNetwork", mutate: func(p *corev1.Pod) { p.Spec.HostNetwork = true }, obj: roce, check: "RoCE networking", status: Pass, detail: "hostNetwork: true"},
		{name: "RoCE with MacVLAN", mutate: func(p *corev1.Pod) { p.Annotations[MultusNetworks] = "roce-macvlan" }, obj: roce, check: "RoCE networking", status: Pass, detail: "re-check the GID index"},
		{name: "no IPC_LOCK", mutate: func(p *corev1.Pod) { p.Spec.Containers[0].SecurityContext = nil }, layer: LayerPermissions, check: "container c: IPC_LOCK", status: Fail, detail: "RDMA cannot pin"},
		{name: "garbled observation", mutate: func(p *corev1.Pod) { p.Annotations[annotations.ObservedKey] = "{" }, layer: LayerDevices, check: "observed devices", status: Fail, detail: annotations.ObservedKey},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := base()
			tc.mutate(p)
			r := Pod(PodState{Pod: p, NRT: tc.obj, SchedulerName: "nicaffinity-scheduler"}, DefaultClusterOptions())
			if r.FailedLayer != tc.layer {
				t.Errorf("failed layer %q, want %q: %+v", r.FailedLayer, tc.layer, r.Checks)
			}
			var c *Check
			for i := range r.Checks {
				if r.Checks[i].Name == tc.check {
					c = &r.Checks[i]
				}
			}
			if c == nil || c.Status != tc.status || !strings.Contains(c.Detail, tc.detail) {
				t.Errorf("check %q = %+v, want %s with %q", tc.check, c, tc.status, tc.detail)
			}
		})
	}
}

func TestNICFromObject(t *testing.T) {
	obj := nrttest.HalfNICs("a", 0)
	for i := range obj.Zones {
		if obj.Zones[i].Type == nrt.ZoneNIC {
			obj.Zones[i].Attributes = append(obj.Zones[i].Attributes, v1alpha2.AttributeInfo{Name: nrt.AttrRate, Value: "400 Gb/sec (4X NDR)"},
				v1alpha2.AttributeInfo{Name: nrt.AttrLinkLayer, Value: "Ethernet"})
		}
	}
	nic, rate, roce, err := NICFromObject(obj)
	if err != nil || nic != "mlx5_0" || rate != 400 || !roce {
		t.Fatalf("NICFromObject = %q %v %v %v", nic, rate, roce, err)
	}
	for i := range obj.Zones {
		if obj.Zones[i].Type == nrt.ZoneNIC {
			obj.Zones[i].Attributes = v1alpha2.AttributeList{{Name: nrt.AttrRate, Value: "fast"}}
		}
	}
	if _, _, _, err := NICFromObject(obj); err == nil || !strings.Contains(err.Error(), "no ACTIVE NIC with a rate") {
		t.Errorf("rates that are no numbers: %v", err)
	}
}

// TestClusterPodGroupAPI: without the PodGroup API the report warns, names
// the API and the apiserver flags that serve it, and fails nothing: the
// scheduler runs without gangs.
func TestClusterPodGroupAPI(t *testing.T) {
	for _, served := range []bool{true, false} {
		s := healthy()
		s.PodGroupAPI = served
		r := Cluster(s, DefaultClusterOptions())
		if !r.OK() {
			t.Errorf("served=%v: the report fails at %s", served, r.FailedLayer)
		}
		var got *Check
		for i := range r.Checks {
			if r.Checks[i].Name == "PodGroup API" {
				got = &r.Checks[i]
			}
		}
		switch {
		case got == nil:
			t.Errorf("served=%v: no PodGroup API check", served)
		case served && got.Status != Pass:
			t.Errorf("served: %+v, want pass", *got)
		case !served && (got.Status != Warn || !strings.Contains(got.Detail, "scheduling.k8s.io/v1beta1") || !strings.Contains(got.Fix, "--runtime-config=scheduling.k8s.io/v1beta1=true")):
			t.Errorf("not served: %+v, want a warning naming the API and the fix", *got)
		}
	}
}

// TestPodNCCL: doctor pod reads what NCCL said in the containers' logs
// (pkg/nccllog's fixtures, in NCCL's formats) and holds it against what the
// exporter observed: the HCAs NCCL used, GPUDirect RDMA on or off for each,
// a fallback to sockets.
func TestPodNCCL(t *testing.T) {
	read := func(name string) map[string]nccllog.Report {
		b, err := os.ReadFile(filepath.Join("..", "nccllog", "testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		r, err := nccllog.Parse(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		return map[string]nccllog.Report{"train": r}
	}
	observed := func(nics ...string) string {
		o := annotations.Observed{NICs: nics, Aligned: true, Level: "PIX", Plan: "matched"}
		for _, n := range nics {
			o.GPUs = append(o.GPUs, annotations.ObservedGPU{BusID: "0000:18:00.0", NIC: n, Level: "PIX"})
		}
		return annotations.Marshal(o)
	}
	for _, tc := range []struct {
		name     string
		nccl     map[string]nccllog.Report
		observed string
		want     map[string]Status // check name -> status
		detail   string
	}{
		{"GPUDirect on, the plan's NICs", read("ib-gdr.log"), observed("mlx5_0", "mlx5_3"),
			map[string]Status{"NCCL in train: HCAs": Info, "NCCL in train: HCAs against the plan": Pass, "NCCL in train: GPUDirect RDMA": Pass}, "mlx5_0:1 (GPUDirect RDMA on)"},
		{"GPUDirect off, a NIC off the plan", read("roce-gdr-disabled.log"), observed("mlx5_0"),
			map[string]Status{"NCCL in train: HCAs against the plan": Warn, "NCCL in train: GPUDirect RDMA": Warn}, "disabled for mlx5_0,mlx5_1"},
		{"sockets", read("socket.log"), observed("mlx5_0"), map[string]Status{"NCCL in train": Fail}, "NCCL uses sockets"},
		{"no NCCL lines", map[string]nccllog.Report{"train": {}}, observed("mlx5_0"), map[string]Status{"NCCL's own words": Info}, "NCCL_DEBUG=INFO"},
		{"logs not read", nil, observed("mlx5_0"), map[string]Status{"NCCL's own words": Info}, "not read"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ml", Annotations: map[string]string{annotations.ObservedKey: tc.observed}}}
			b := newBuilder("pod")
			b.layer = LayerNCCL
			podNCCL(b, PodState{Pod: p, NCCL: tc.nccl}, mustObserved(t, tc.observed))
			r := b.report()
			got := map[string]Status{}
			details := ""
			for _, c := range r.Checks {
				if _, ok := tc.want[c.Name]; ok {
					got[c.Name] = c.Status
				}
				details += c.Detail + "\n"
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("checks (-want,+got):\n%s\n%+v", diff, r.Checks)
			}
			if !strings.Contains(details, tc.detail) {
				t.Errorf("details %q do not say %q", details, tc.detail)
			}
		})
	}
}

func mustObserved(t *testing.T, s string) *annotations.Observed {
	o, err := annotations.ParseObserved(s)
	if err != nil {
		t.Fatal(err)
	}
	return &o
}
