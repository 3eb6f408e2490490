package integration

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/k8stopologyawareschedwg/noderesourcetopology-api/pkg/apis/topology/v1alpha2"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/nicaffinity/nicaffinity/internal/controlplane"
	"github.com/nicaffinity/nicaffinity/internal/podresourcessim"
	"github.com/nicaffinity/nicaffinity/pkg/annotations"
	"github.com/nicaffinity/nicaffinity/pkg/devices"
	"github.com/nicaffinity/nicaffinity/pkg/exporter"
	"github.com/nicaffinity/nicaffinity/pkg/machines"
	"github.com/nicaffinity/nicaffinity/pkg/podresources"
	"github.com/nicaffinity/nicaffinity/pkg/topology"
	"github.com/nicaffinity/nicaffinity/pkg/topology/discovery"
)

const node = "gpu-node-1"

type exporterEnv struct {
	cp      *controlplane.ControlPlane
	kubelet *podresourcessim.Server
	topo    *topology.Topology
	cancel  context.CancelFunc
	done    chan error
}

// startExporter runs the real exporter against an HGX H100 sysfs tree (mlx5_3
// down), a podresources server on a unix socket and the in-process apiserver.
func startExporter(t *testing.T, resync time.Duration) *exporterEnv {
	t.Helper()
	env := &exporterEnv{cp: controlplane.Start(t)}
	tree := machines.New(t.TempDir())
	machines.HGXH100(tree)
	tree.WriteFile("class/infiniband/mlx5_3/ports/1/state", "1: DOWN")
	if err := tree.Err(); err != nil {
		t.Fatal(err)
	}
	disc := discovery.Host{SysfsRoot: tree.Root, NVMLMode: discovery.NVMLOff}
	var err error
	if env.topo, err = disc.Discover(); err != nil {
		t.Fatal(err)
	}
	env.kubelet = podresourcessim.New(filepath.Join(t.TempDir(), "kubelet.sock"))
	var offered []devices.Device
	for _, g := range env.topo.GPUs {
		offered = append(offered, devices.Device{Resource: "nvidia.com/gpu", ID: g.PCI.Address, NUMANodes: []int{topology.NUMAOf(g.PCI)}})
	}
	offered = append(offered, devices.Device{Resource: "rdma/hca", ID: "hca"})
	env.kubelet.SetAllocatable(offered)
	if err := env.kubelet.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(env.kubelet.Stop)
	src, err := podresources.Dial(env.kubelet.Socket, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Close() })

	cfg := exporter.DefaultConfig(node)
	cfg.ResyncPeriod = resync
	cfg.MaxBackoff = 2 * time.Second
	client, err := exporter.NewClient(env.cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	exp := exporter.New(cfg, disc, src, client, exporter.ApplyPublisher{Client: client}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	env.cancel, env.done = cancel, make(chan error, 1)
	go func() { env.done <- exp.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-env.done; err != nil {
			t.Errorf("exporter Run: %v", err)
		}
	})
	return env
}

func (env *exporterEnv) nrt(ctx context.Context) (*v1alpha2.NodeResourceTopology, error) {
	return env.cp.NRT.TopologyV1alpha2().NodeResourceTopologies().Get(ctx, node, metav1.GetOptions{})
}

// waitNRT waits until cond holds on the published object and returns how long that took.
func (env *exporterEnv) waitNRT(t testing.TB, what string, cond func(*v1alpha2.NodeResourceTopology) bool) time.Duration {
	t.Helper()
	start := time.Now()
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		obj, err := env.nrt(ctx)
		if err != nil {
			return false, nil
		}
		return cond(obj), nil
	})
	if err != nil {
		obj, _ := env.nrt(context.Background())
		t.Fatalf("waiting for %s: %v; object now: %+v", what, err, obj)
	}
	return time.Since(start)
}

func zoneRes(obj *v1alpha2.NodeResourceTopology, zone, res string) string {
	for _, z := range obj.Zones {
		if z.Name != zone {
			continue
		}
		for _, r := range z.Resources {
			if r.Name == res {
				return fmt.Sprintf("%s/%s/%s", r.Capacity.String(), r.Allocatable.String(), r.Available.String())
			}
		}
	}
	return "absent"
}

func gpuPod(t *testing.T, env *exporterEnv, name string, gpus ...int) {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "main", Image: "train"}}},
	}
	if _, err := env.cp.Kube.CoreV1().Pods("default").Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	devs := []devices.Device{{Resource: "rdma/hca", ID: "hca"}}
	for _, g := range gpus {
		devs = append(devs, devices.Device{Resource: "nvidia.com/gpu", ID: env.topo.GPUs[g].PCI.Address, NUMANodes: []int{topology.NUMAOf(env.topo.GPUs[g].PCI)}})
	}
	env.kubelet.SetPod("default", name, devs)
}

func TestExporterPublishesAndFollows(t *testing.T) {
	env := startExporter(t, time.Minute)
	ctx := context.Background()

	env.waitNRT(t, "the first object", func(o *v1alpha2.NodeResourceTopology) bool {
		return zoneRes(o, "node-0", "nvidia.com/gpu") == "4/4/4"
	})
	obj, err := env.nrt(ctx)
	if err != nil {
		t.Fatal(err)
	}
	types := map[string]int{}
	for _, z := range obj.Zones {
		types[z.Type]++
	}
	if types["Node"] != 2 || types["PCIeSwitch"] != 8 || types["GPU"] != 8 || types["NIC"] != 8 {
		t.Errorf("zone types = %v, want 2 Node, 8 PCIeSwitch, 8 GPU, 8 NIC", types)
	}
	for _, z := range obj.Zones {
		if z.Name != "gpu-3" {
			continue
		}
		for _, c := range z.Costs {
			if c.Name == "nic-mlx5_3" {
				t.Errorf("gpu-3 has a cost to nic-mlx5_3, which is down")
			}
		}
	}

	// An allocation appears: the object follows, and the pod is verified.
	gpuPod(t, env, "train-0", 0)
	took := env.waitNRT(t, "GPU 0 taken", func(o *v1alpha2.NodeResourceTopology) bool {
		return zoneRes(o, "gpu-0", "nvidia.com/gpu") == "1/1/0" && zoneRes(o, "node-0", "nvidia.com/gpu") == "4/4/3"
	})
	t.Logf("allocation -> NodeResourceTopology: %v", took)
	observed := waitObserved(t, env, "train-0")
	if !observed.Aligned || observed.Level != "PIX" || len(observed.NICs) != 1 || observed.NICs[0] != "mlx5_0" || observed.Plan != "none" {
		t.Errorf("train-0 observed %+v, want aligned at PIX on mlx5_0", observed)
	}
	waitEvent(t, env, "train-0", "Aligned")

	// GPU 3's own NIC is down: the nearest usable one is NODE away.
	gpuPod(t, env, "train-3", 3)
	observed = waitObserved(t, env, "train-3")
	if observed.Aligned || observed.Level != "NODE" {
		t.Errorf("train-3 observed %+v, want misaligned at NODE", observed)
	}
	ev := waitEvent(t, env, "train-3", "Misaligned")
	if ev.Type != corev1.EventTypeWarning || !strings.Contains(ev.Message, "NODE") {
		t.Errorf("event %s %q", ev.Type, ev.Message)
	}

	// The pod ends: the GPU comes back.
	env.kubelet.DeletePod("default", "train-0")
	if err := env.cp.Kube.CoreV1().Pods("default").Delete(ctx, "train-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	took = env.waitNRT(t, "GPU 0 free again", func(o *v1alpha2.NodeResourceTopology) bool {
		return zoneRes(o, "gpu-0", "nvidia.com/gpu") == "1/1/1"
	})
	t.Logf("release -> NodeResourceTopology: %v", took)
}

// TestExporterSurvivesKubeletRestartAndDeletion: the socket goes away (the
// last good object stays), comes back with other allocations (the object
// follows), and a deleted object is written again by the resync.
func TestExporterSurvivesKubeletRestartAndDeletion(t *testing.T) {
	// Mostly waiting (leases, resync periods, restarts): run beside the
	// other waiting tests, each with its own control plane.
	t.Parallel()
	env := startExporter(t, 2*time.Second)
	ctx := context.Background()
	env.waitNRT(t, "the first object", func(o *v1alpha2.NodeResourceTopology) bool {
		return zoneRes(o, "gpu-1", "nvidia.com/gpu") == "1/1/1"
	})

	env.kubelet.Stop()
	gpuPod(t, env, "during-restart", 1)
	time.Sleep(3 * time.Second) // several failed syncs
	obj, err := env.nrt(ctx)
	if err != nil || zoneRes(obj, "gpu-1", "nvidia.com/gpu") != "1/1/1" {
		t.Fatalf("during the outage the object must stay as it was: %v %v", err, obj)
	}
	if err := env.kubelet.Start(); err != nil {
		t.Fatal(err)
	}
	env.waitNRT(t, "the allocation made while the kubelet was away", func(o *v1alpha2.NodeResourceTopology) bool {
		return zoneRes(o, "gpu-1", "nvidia.com/gpu") == "1/1/0"
	})

	if err := env.cp.NRT.TopologyV1alpha2().NodeResourceTopologies().Delete(ctx, node, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	env.waitNRT(t, "the object written again after deletion", func(o *v1alpha2.NodeResourceTopology) bool {
		return zoneRes(o, "gpu-1", "nvidia.com/gpu") == "1/1/0"
	})
}

func waitObserved(t *testing.T, env *exporterEnv, pod string) annotations.Observed {
	t.Helper()
	var out annotations.Observed
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := env.cp.Kube.CoreV1().Pods("default").Get(ctx, pod, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		v, ok := p.Annotations[annotations.ObservedKey]
		if !ok {
			return false, nil
		}
		return true, jsonUnmarshal(v, &out)
	})
	if err != nil {
		t.Fatalf("pod %s never got %s: %v", pod, annotations.ObservedKey, err)
	}
	return out
}

func waitEvent(t *testing.T, env *exporterEnv, pod, reason string) corev1.Event {
	t.Helper()
	var found corev1.Event
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		list, err := env.cp.Kube.CoreV1().Events("default").List(ctx, metav1.ListOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return false, nil
		}
		for _, e := range list.Items {
			if e.InvolvedObject.Name == pod && e.Reason == reason {
				found = e
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no %s event for %s: %v", reason, pod, err)
	}
	return found
}
