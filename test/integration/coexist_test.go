package integration

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/k8stopologyawareschedwg/noderesourcetopology-api/pkg/apis/topology/v1alpha2"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/nicaffinity/nicaffinity/internal/controlplane"
	"github.com/nicaffinity/nicaffinity/internal/podresourcessim"
	"github.com/nicaffinity/nicaffinity/pkg/devices"
	"github.com/nicaffinity/nicaffinity/pkg/exporter"
	"github.com/nicaffinity/nicaffinity/pkg/machines"
	"github.com/nicaffinity/nicaffinity/pkg/nrt"
	"github.com/nicaffinity/nicaffinity/pkg/podresources"
	"github.com/nicaffinity/nicaffinity/pkg/topology"
	"github.com/nicaffinity/nicaffinity/pkg/topology/discovery"
)

// foreignObject is the object NFD's topology-updater or the Resource
// Topology Exporter publishes for a two-socket node: Node zones with cpu
// and memory, the topology manager attributes, no nicaffinity schema.
func foreignObject(name string) *v1alpha2.NodeResourceTopology {
	q := resource.MustParse
	zone := func(numa string) v1alpha2.Zone {
		return v1alpha2.Zone{Name: "node-" + numa, Type: "Node", Resources: v1alpha2.ResourceInfoList{
			{Name: "cpu", Capacity: q("96"), Allocatable: q("94"), Available: q("90")},
			{Name: "memory", Capacity: q("270000000000"), Allocatable: q("268000000000"), Available: q("260000000000")},
			{Name: "nvidia.com/gpu", Capacity: q("4"), Allocatable: q("4"), Available: q("4")},
		}}
	}
	return &v1alpha2.NodeResourceTopology{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha2.SchemeGroupVersion.String(), Kind: "NodeResourceTopology"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Zones:      v1alpha2.ZoneList{zone("0"), zone("1")},
		Attributes: v1alpha2.AttributeList{{Name: "topologyManagerPolicy", Value: "single-numa-node"}, {Name: "topologyManagerScope", Value: "container"}},
	}
}

// writer is a stand-in for another updater, writing as it does.
type writer struct {
	manager string
	write   func(ctx context.Context, cp *controlplane.ControlPlane, obj *v1alpha2.NodeResourceTopology) error
}

var (
	// NFD's topology-updater force-applies its whole object (every 60 s).
	nfdWriter = writer{manager: "node-feature-discovery-topology-updater", write: func(ctx context.Context, cp *controlplane.ControlPlane, obj *v1alpha2.NodeResourceTopology) error {
		body, err := json.Marshal(obj)
		if err != nil {
			return err
		}
		force := true
		_, err = cp.NRT.TopologyV1alpha2().NodeResourceTopologies().Patch(ctx, obj.Name, types.ApplyPatchType, body,
			metav1.PatchOptions{FieldManager: "node-feature-discovery-topology-updater", Force: &force})
		return err
	}}
	// The Resource Topology Exporter reads, changes and updates (create
	// the first time), under its own manager.
	rteWriter = writer{manager: "resource-topology-exporter", write: func(ctx context.Context, cp *controlplane.ControlPlane, obj *v1alpha2.NodeResourceTopology) error {
		c := cp.NRT.TopologyV1alpha2().NodeResourceTopologies()
		cur, err := c.Get(ctx, obj.Name, metav1.GetOptions{})
		if err != nil {
			_, err = c.Create(ctx, obj, metav1.CreateOptions{FieldManager: "resource-topology-exporter"})
			return err
		}
		cur.Zones, cur.Attributes = obj.Zones, obj.Attributes
		_, err = c.Update(ctx, cur, metav1.UpdateOptions{FieldManager: "resource-topology-exporter"})
		return err
	}}
)

// TestCoexistence: another updater owns the node's object. nicaffinity's
// exporter does not overwrite it, whichever way the other writes, and says
// why (readiness, metric, Event on the Node). Once the other updater is off
// and its object deleted (the documented migration), the exporter writes
// an object that both NodeResourceTopologyMatch (Node zones with cpu and
// memory, topology manager attributes) and nicaffinity's plugin read.
func TestCoexistence(t *testing.T) {
	// Mostly waiting (leases, resync periods, restarts): run beside the
	// other waiting tests, each with its own control plane.
	t.Parallel()
	cp := controlplane.Start(t)
	for i, other := range []writer{nfdWriter, rteWriter} {
		t.Run(other.manager, func(t *testing.T) {
			nodeName := []string{"coexist-nfd", "coexist-rte"}[i]
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()

			// The other updater was there first, and keeps writing.
			if err := other.write(ctx, cp, foreignObject(nodeName)); err != nil {
				t.Fatal(err)
			}
			otherDone := make(chan struct{})
			otherCtx, stopOther := context.WithCancel(ctx)
			go func() {
				defer close(otherDone)
				_ = wait.PollUntilContextCancel(otherCtx, 100*time.Millisecond, false, func(ctx context.Context) (bool, error) {
					if err := other.write(ctx, cp, foreignObject(nodeName)); err != nil && ctx.Err() == nil {
						t.Errorf("%s: %v", other.manager, err)
					}
					return false, nil
				})
			}()

			exp := runExporter(t, ctx, cp, nodeName, time.Second)
			waitFor(t, "the exporter to report the other writer", func() bool {
				err := exp.Readiness()
				return err != nil && strings.Contains(err.Error(), `managed by "`+other.manager+`"`)
			})
			// Resyncs retry, and the object stays the other writer's.
			time.Sleep(2500 * time.Millisecond)
			obj, err := cp.NRT.TopologyV1alpha2().NodeResourceTopologies().Get(ctx, nodeName, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range obj.ManagedFields {
				if m.Manager == nrt.ExporterFieldManager {
					t.Errorf("the exporter owns fields of the other writer's object: %+v", m)
				}
			}
			if len(obj.Zones) != 2 || attrOf(obj, nrt.AttrSchema) != "" {
				t.Errorf("the other writer's object was changed: %d zones, schema %q", len(obj.Zones), attrOf(obj, nrt.AttrSchema))
			}
			if _, err := nrt.Compile(obj, "nvidia.com/gpu"); err == nil || !strings.Contains(err.Error(), `written by "`+other.manager+`", not by nicaffinity's exporter`) {
				t.Errorf("the plugin's reason for the node: %v", err)
			}
			if got := testutil.ToFloat64(exp.Metrics().Blocked.WithLabelValues(other.manager)); got != 1 {
				t.Errorf("%s{manager=%q} = %v, want 1", "nicaffinity_exporter_topology_foreign_manager", other.manager, got)
			}
			if err := exp.Healthy(); err != nil {
				t.Errorf("an exporter that leaves another writer alone is healthy (the kubelet must not restart it): %v", err)
			}
			waitNodeEvent(t, cp, nodeName, "TopologyOwnedElsewhere", other.manager)

			// The migration: the other updater stops on this node, its object goes.
			stopOther()
			<-otherDone
			if err := cp.NRT.TopologyV1alpha2().NodeResourceTopologies().Delete(ctx, nodeName, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the exporter to write the node's object", func() bool { return exp.Readiness() == nil })
			obj, err = cp.NRT.TopologyV1alpha2().NodeResourceTopologies().Get(ctx, nodeName, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := nrt.Compile(obj, "nvidia.com/gpu"); err != nil {
				t.Errorf("nicaffinity's plugin cannot read the exporter's object: %v", err)
			}
			// What NodeResourceTopologyMatch reads: the policy, and cpu,
			// memory and GPUs per NUMA node (test/compat runs its real
			// Filter and Score on such objects).
			if attrOf(obj, "topologyManagerPolicy") != "single-numa-node" || attrOf(obj, "topologyManagerScope") != "pod" {
				t.Errorf("topology manager attributes: policy %q scope %q", attrOf(obj, "topologyManagerPolicy"), attrOf(obj, "topologyManagerScope"))
			}
			for _, want := range []struct{ zone, res, value string }{
				{"node-0", "cpu", "96/95/93"}, // CPU 0 reserved, 1-2 held
				{"node-0", "memory", "270G/268G/260G"},
				{"node-0", "nvidia.com/gpu", "4/4/3"},
				{"node-1", "cpu", "96/95/95"}, // CPU 48 reserved
				{"node-1", "nvidia.com/gpu", "4/4/4"},
			} {
				if got := zoneRes(obj, want.zone, want.res); got != want.value {
					t.Errorf("%s %s = %s, want %s", want.zone, want.res, got, want.value)
				}
			}
			if got := testutil.ToFloat64(exp.Metrics().Blocked.WithLabelValues(other.manager)); got != 0 {
				t.Errorf("blocked metric after the hand-over = %v, want 0", got)
			}
			waitNodeEvent(t, cp, nodeName, "TopologyPublished", "again")
		})
	}
}

// runExporter runs the real exporter for nodeName over an HGX H100 sysfs
// tree and a kubelet (podresources on a unix socket) whose CPU and memory
// managers are static: CPUs 0 (NUMA 0) and 48 (NUMA 1) are reserved, a Guaranteed pod holds
// GPU 0, CPUs 1-2 and 8 GB on NUMA node 0. The kubelet runs single-numa-node
// at pod scope.
func runExporter(t *testing.T, ctx context.Context, cp *controlplane.ControlPlane, nodeName string, resync time.Duration) *exporter.Exporter {
	t.Helper()
	tree := machines.New(t.TempDir())
	machines.HGXH100(tree)
	tree.NUMAMemory(0, 270000000000/1024, nil)
	tree.NUMAMemory(1, 270000000000/1024, nil)
	if err := tree.Err(); err != nil {
		t.Fatal(err)
	}
	disc := discovery.Host{SysfsRoot: tree.Root, NVMLMode: discovery.NVMLOff}
	topo, err := disc.Discover()
	if err != nil {
		t.Fatal(err)
	}
	kubelet := podresourcessim.New(filepath.Join(t.TempDir(), "kubelet.sock"))
	var offered []devices.Device
	for _, g := range topo.GPUs {
		offered = append(offered, devices.Device{Resource: "nvidia.com/gpu", ID: g.PCI.Address, NUMANodes: []int{topology.NUMAOf(g.PCI)}})
	}
	kubelet.SetAllocatable(offered)
	var cpus []int
	for c := 0; c < 192; c++ {
		if c != 0 && c != 48 {
			cpus = append(cpus, c)
		}
	}
	kubelet.SetAllocatableCPUsMemory(cpus, []devices.Memory{
		{Type: "memory", Bytes: 268000000000, NUMANodes: []int{0}},
		{Type: "memory", Bytes: 268000000000, NUMANodes: []int{1}},
	})
	kubelet.SetPodResources(devices.Pod{Namespace: "default", Name: "guaranteed", CPUs: []int{1, 2},
		Devices: []devices.Device{{Resource: "nvidia.com/gpu", ID: topo.GPUs[0].PCI.Address, NUMANodes: []int{0}}},
		Memory:  []devices.Memory{{Type: "memory", Bytes: 8000000000, NUMANodes: []int{0}}}})
	if err := kubelet.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kubelet.Stop)
	src, err := podresources.Dial(kubelet.Socket, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Close() })
	cfg := exporter.DefaultConfig(nodeName)
	cfg.ResyncPeriod, cfg.MaxBackoff = resync, time.Second
	cfg.TopologyManagerPolicy, cfg.TopologyManagerScope = "single-numa-node", "pod"
	client, err := exporter.NewClient(cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	exp := exporter.New(cfg, disc, src, client, exporter.ApplyPublisher{Client: client}, nil)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- exp.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("exporter Run: %v", err)
		}
	})
	return exp
}

func attrOf(obj *v1alpha2.NodeResourceTopology, name string) string {
	for _, a := range obj.Attributes {
		if a.Name == name {
			return a.Value
		}
	}
	return ""
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return cond(), nil
	}); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// waitNodeEvent waits for an Event on the Node with reason and a message
// containing text.
func waitNodeEvent(t *testing.T, cp *controlplane.ControlPlane, nodeName, reason, text string) {
	t.Helper()
	var seen []string
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		list, err := cp.Kube.CoreV1().Events(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		seen = seen[:0]
		for _, e := range list.Items {
			if e.InvolvedObject.Kind != "Node" || e.InvolvedObject.Name != nodeName {
				continue
			}
			seen = append(seen, e.Reason+": "+e.Message)
			if e.Reason == reason && strings.Contains(e.Message, text) {
				return e.Type == map[bool]string{true: corev1.EventTypeWarning, false: corev1.EventTypeNormal}[reason == "TopologyOwnedElsewhere"], nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no %s event on node %s mentioning %q (events: %q): %v", reason, nodeName, text, seen, err)
	}
}
