// Package cluster assembles a simulated GPU cluster on an in-process control
// plane: per node a sysfs tree of a real machine's shape, a simulated kubelet
// serving podresources, and the real topology exporter publishing its
// NodeResourceTopology. Tests and the simulator share it.
package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"k8s.io/kubernetes/test/utils/ktesting"

	"github.com/nicaffinity/nicaffinity/internal/controlplane"
	"github.com/nicaffinity/nicaffinity/internal/kubeletsim"
	"github.com/nicaffinity/nicaffinity/pkg/exporter"
	"github.com/nicaffinity/nicaffinity/pkg/machines"
	"github.com/nicaffinity/nicaffinity/pkg/podresources"
	"github.com/nicaffinity/nicaffinity/pkg/topology"
	"github.com/nicaffinity/nicaffinity/pkg/topology/discovery"
)

// NodeSpec is one node to simulate.
type NodeSpec struct {
	Name string
	// Machine builds the node's sysfs tree; the exporter discovers it.
	Machine func(*machines.Tree)
	// Topology is used instead when there is no tree (NCCL XML profiles):
	// the exporter is handed the topology as is.
	Topology *topology.Topology
	// Policy is the simulated device plugin's GPU policy (kubeletsim).
	Policy string
}

// Options tune the node side.
type Options struct {
	// MinWriteInterval and ResyncPeriod of every exporter.
	MinWriteInterval, ResyncPeriod time.Duration
	RDMAResource                   string
	SRIOVResource                  string
	// StaticTopology hands each exporter the topology discovered once at
	// start instead of its sysfs tree: replays never change a tree, and
	// rediscovery on every sync was a quarter of a 64-node replay's CPU.
	StaticTopology bool
	// RailSource is where every exporter reads its NICs' rails from
	// (nrt.RailFromPCIRank, ...); empty publishes none.
	RailSource string
}

// DefaultOptions are the exporter's defaults and the guides' resource names.
func DefaultOptions() Options {
	return Options{MinWriteInterval: time.Second, ResyncPeriod: time.Minute, RDMAResource: "rdma/hca", SRIOVResource: "openshift.io/sriov_highnet"}
}

// Node is one simulated node.
type Node struct {
	Name     string
	Topology *topology.Topology
	Kubelet  *kubeletsim.Kubelet

	disc    exporter.Discoverer
	socket  string
	opts    Options
	mu      sync.Mutex
	cancel  context.CancelFunc
	done    chan struct{}
	cluster *Cluster
}

// Cluster is a running simulated cluster.
type Cluster struct {
	CP    *controlplane.ControlPlane
	Nodes map[string]*Node

	mu    sync.Mutex
	stops []func()
}

func (c *Cluster) onStop(f func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stops = append(c.stops, f)
}

// New builds and starts every node on cp. Stop stops them.
func New(ctx context.Context, cp *controlplane.ControlPlane, opts Options, specs ...NodeSpec) (*Cluster, error) {
	c := &Cluster{CP: cp, Nodes: map[string]*Node{}}
	fail := func(err error) (*Cluster, error) {
		c.Stop()
		return nil, err
	}
	// Unix socket paths must stay short (108 bytes): one short temp dir.
	sockDir, err := os.MkdirTemp("", "nicaff")
	if err != nil {
		return nil, err
	}
	c.onStop(func() { os.RemoveAll(sockDir) })
	ctx, cancel := context.WithCancel(ctx)
	c.onStop(cancel)
	for i, s := range specs {
		n := &Node{Name: s.Name, socket: filepath.Join(sockDir, fmt.Sprintf("%d.sock", i)), opts: opts, cluster: c}
		if s.Machine != nil {
			tree := machines.New(filepath.Join(sockDir, fmt.Sprintf("tree-%d", i)))
			s.Machine(tree)
			if err := tree.Err(); err != nil {
				return fail(fmt.Errorf("node %s: %w", s.Name, err))
			}
			n.disc = discovery.Host{SysfsRoot: tree.Root, NVMLMode: discovery.NVMLOff, NVIDIAProc: filepath.Join(tree.Root, machines.NVIDIAProcDir)}
		} else {
			topo := s.Topology
			n.disc = exporter.DiscovererFunc(func() (*topology.Topology, error) { return topo, nil })
		}
		if n.Topology, err = n.disc.Discover(); err != nil {
			return fail(fmt.Errorf("node %s: %w", s.Name, err))
		}
		if opts.StaticTopology {
			topo := n.Topology
			n.disc = exporter.DiscovererFunc(func() (*topology.Topology, error) { return topo, nil })
		}
		n.Kubelet, err = kubeletsim.New(kubeletsim.Config{
			Name: s.Name, Topology: n.Topology, Socket: n.socket, Policy: s.Policy,
			GPUResource: "nvidia.com/gpu", RDMAResource: opts.RDMAResource, RDMASlots: 100, SRIOVResource: opts.SRIOVResource,
		}, cp.Kube)
		if err != nil {
			return fail(err)
		}
		if err := n.Kubelet.Start(ctx); err != nil {
			return fail(fmt.Errorf("node %s kubelet: %w", s.Name, err))
		}
		c.Nodes[s.Name] = n
		if err := n.StartExporter(); err != nil {
			return fail(err)
		}
	}
	return c, nil
}

// Stop stops every node (exporters, then kubelets), last started first.
func (c *Cluster) Stop() {
	for _, n := range c.Nodes {
		n.StopExporter()
	}
	c.mu.Lock()
	stops := c.stops
	c.stops = nil
	c.mu.Unlock()
	for i := len(stops) - 1; i >= 0; i-- {
		stops[i]()
	}
}

// Start is New for a test: the cluster stops at the test's cleanup, and a
// failure fails the test.
func Start(t ktesting.TB, cp *controlplane.ControlPlane, opts Options, specs ...NodeSpec) *Cluster {
	t.Helper()
	c, err := New(context.Background(), cp, opts, specs...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	return c
}

// StartExporter runs the node's real exporter (again, after StopExporter).
func (n *Node) StartExporter() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cancel != nil {
		return nil
	}
	src, err := podresources.Dial(n.socket, 5*time.Second)
	if err != nil {
		return fmt.Errorf("node %s: %w", n.Name, err)
	}
	cfg := exporter.DefaultConfig(n.Name)
	cfg.MinWriteInterval, cfg.ResyncPeriod = n.opts.MinWriteInterval, n.opts.ResyncPeriod
	cfg.MaxBackoff = 2 * time.Second
	cfg.Resources.SRIOV = []string{n.opts.SRIOVResource}
	cfg.Rails.Source = n.opts.RailSource
	client, err := n.cluster.CP.ExporterClient()
	if err != nil {
		src.Close()
		return fmt.Errorf("node %s: %w", n.Name, err)
	}
	exp := exporter.New(cfg, n.disc, src, client, exporter.ApplyPublisher{Client: client}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	n.cancel, n.done = cancel, make(chan struct{})
	done := n.done
	go func() {
		defer close(done)
		defer src.Close()
		_ = exp.Run(ctx)
	}()
	return nil
}

// StopExporter stops the node's exporter (its object stays as last written).
func (n *Node) StopExporter() {
	n.mu.Lock()
	cancel, done := n.cancel, n.done
	n.cancel, n.done = nil, nil
	n.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}
