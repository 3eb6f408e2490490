package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/k8stopologyawareschedwg/noderesourcetopology-api/pkg/apis/topology/v1alpha2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/nicaffinity/nicaffinity/internal/controlplane"
	"github.com/nicaffinity/nicaffinity/internal/schedulerrun"
	"github.com/nicaffinity/nicaffinity/pkg/annotations"
	"github.com/nicaffinity/nicaffinity/pkg/devices"
	"github.com/nicaffinity/nicaffinity/pkg/machines"
	"github.com/nicaffinity/nicaffinity/pkg/nrt"
	"github.com/nicaffinity/nicaffinity/pkg/nrt/nrttest"
)

func gpuNode(t *testing.T, cp *controlplane.ControlPlane, name string) {
	t.Helper()
	res := corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("128"), corev1.ResourceMemory: resource.MustParse("1Ti"), corev1.ResourcePods: resource.MustParse("110"),
		"nvidia.com/gpu": resource.MustParse("8"), "rdma/hca": resource.MustParse("100"),
	}
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}},
		Status: corev1.NodeStatus{Capacity: res, Allocatable: res,
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}},
	}
	if _, err := cp.Kube.CoreV1().Nodes().Create(context.Background(), node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func createNRT(t *testing.T, cp *controlplane.ControlPlane, obj *v1alpha2.NodeResourceTopology) {
	t.Helper()
	if _, err := cp.NRT.TopologyV1alpha2().NodeResourceTopologies().Create(context.Background(), obj, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func rdmaPod(name string, gpus int64, ann map[string]string) *corev1.Pod {
	limits := corev1.ResourceList{"nvidia.com/gpu": *resource.NewQuantity(gpus, resource.DecimalSI), "rdma/hca": resource.MustParse("1")}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Annotations: ann},
		Spec: corev1.PodSpec{SchedulerName: "nicaffinity-scheduler",
			Containers: []corev1.Container{{Name: "train", Image: "train", Resources: corev1.ResourceRequirements{Limits: limits, Requests: limits}}}},
	}
}

func waitBound(t *testing.T, cp *controlplane.ControlPlane, name string) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	if err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := cp.Kube.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		pod = p
		return p.Spec.NodeName != "", nil
	}); err != nil {
		t.Fatalf("pod %s not bound: %v", name, err)
	}
	return pod
}

// TestSchedulerPlacesNextToNICs runs the real scheduler with the shipped
// configuration: a 1-GPU RDMA pod goes to the node whose free GPUs have a PIX
// NIC, a pod no node can serve stays Pending with per-node reasons, and it is
// placed without manual action once a node that can serve it appears.
func TestSchedulerPlacesNextToNICs(t *testing.T) {
	cp := controlplane.Start(t)
	ctx := context.Background()
	if _, err := cp.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "nicaffinity-system"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	gpuNode(t, cp, "nics-taken")
	createNRT(t, cp, nrttest.HalfNICs("nics-taken", 4, 5, 6, 7))
	gpuNode(t, cp, "nics-free")
	createNRT(t, cp, nrttest.HalfNICs("nics-free", 0, 1, 2, 3, 4, 5, 6, 7))
	cfg, err := schedulerrun.ShippedConfig()
	if err != nil {
		t.Fatal(err)
	}
	schedulerrun.Start(t, cp, cfg)

	if _, err := cp.Kube.CoreV1().Pods("default").Create(ctx, rdmaPod("one-gpu", 1, nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := waitBound(t, cp, "one-gpu")
	if pod.Spec.NodeName != "nics-free" {
		t.Errorf("one-gpu went to %s, want nics-free", pod.Spec.NodeName)
	}
	plan, err := annotations.ParseAllocation(pod.Annotations[annotations.AllocationKey])
	if err != nil {
		t.Fatalf("allocation annotation: %v", err)
	}
	if plan.Node != "nics-free" || plan.Level != "PIX" || len(plan.GPUs) != 1 || len(plan.NICs) != 1 {
		t.Errorf("plan %+v, want one PIX GPU with its NIC on nics-free", plan)
	}

	// Five GPUs at PIX: no node has five GPUs next to a NIC. Required: a
	// bounded pod (the default) would not wait for what no node has.
	if _, err := cp.Kube.CoreV1().Pods("default").Create(ctx, rdmaPod("five-pix", 5, map[string]string{annotations.MaxLevel: "PIX", annotations.Policy: annotations.PolicyRequired}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var msg string
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		events, err := cp.Kube.CoreV1().Events("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, e := range events.Items {
			if e.InvolvedObject.Name == "five-pix" && e.Reason == "FailedScheduling" {
				msg = e.Message
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Fatalf("no FailedScheduling event: %v", err)
	}
	if !strings.Contains(msg, "none of the 4 free GPUs has a NIC at PIX or closer") || !strings.Contains(msg, "of the 7 free GPUs have a NIC at PIX or closer; the pod needs 5") {
		t.Errorf("FailedScheduling says %q; want the per-node reason", msg)
	}
	t.Logf("FailedScheduling: %s", msg)

	// An HGX H100 node joins (every GPU PIX to a NIC): the pod goes there.
	topo, err := machines.Discover(t.TempDir(), machines.HGXH100)
	if err != nil {
		t.Fatal(err)
	}
	var offered []devices.Device
	for _, g := range topo.GPUs {
		offered = append(offered, devices.Device{Resource: "nvidia.com/gpu", ID: g.PCI.Address})
	}
	obj, _ := nrt.Build(nrt.Input{Node: "h100", Topology: topo, Snapshot: devices.Snapshot{Allocatable: offered}, Resources: nrt.DefaultResources()})
	createNRT(t, cp, obj)
	gpuNode(t, cp, "h100")
	if got := waitBound(t, cp, "five-pix").Spec.NodeName; got != "h100" {
		t.Errorf("five-pix went to %s, want h100", got)
	}
}
