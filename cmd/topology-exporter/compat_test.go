package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/nicaffinity/nicaffinity/internal/golden"
	"github.com/nicaffinity/nicaffinity/internal/podresourcessim"
	"github.com/nicaffinity/nicaffinity/pkg/devices"
	"github.com/nicaffinity/nicaffinity/pkg/machines"
	"github.com/nicaffinity/nicaffinity/pkg/topology"
	"github.com/nicaffinity/nicaffinity/pkg/topology/discovery"
)

var update = flag.Bool("update", false, "rewrite the golden objects under test/compat/testdata")

const gib = int64(1) << 30

// compatMachine is a fixture machine in a known state: what the kubelet
// offers (CPU and memory managers static, CPU 0 reserved) and what pods hold.
type compatMachine struct {
	name  string
	build func(*machines.Tree)
	// memory per NUMA node: MemTotal and what the memory manager offers.
	memTotal, memAllocatable int64
	// held: GPU indexes, CPUs and memory (on the GPUs' NUMA node) per pod.
	held []compatPod
}

type compatPod struct {
	name string
	gpus []int
	cpus []int
	mem  int64
}

func cpuRange(from, to int) []int {
	var out []int
	for c := from; c <= to; c++ {
		out = append(out, c)
	}
	return out
}

// compatMachines are the states test/compat runs NodeResourceTopologyMatch
// on. test/compat/testdata/README.md gives their free resources per NUMA
// node, from which the Resource Topology Exporter's objects there are
// written by hand.
var compatMachines = []compatMachine{
	{
		// NUMA 0: GPUs 0-3, CPUs 0-47,96-143; NUMA 1: GPUs 4-7, CPUs 48-95,144-191.
		name: "hgx-h100", build: machines.HGXH100, memTotal: 256 * gib, memAllocatable: 250 * gib,
		held: []compatPod{
			{name: "big", gpus: []int{0, 1, 2}, cpus: append(cpuRange(1, 47), cpuRange(96, 108)...), mem: 200 * gib},
			{name: "small", gpus: []int{4}, cpus: cpuRange(49, 58), mem: 16 * gib},
		},
	},
	{
		// Eight NUMA nodes of 32 CPUs (16n..16n+15, 128+16n..); GPUs 0-1 on
		// NUMA 3, 2-3 on NUMA 1, 4-5 on NUMA 7, 6-7 on NUMA 5.
		name: "dgx-a100", build: machines.DGXA100, memTotal: 128 * gib, memAllocatable: 126 * gib,
		held: []compatPod{
			{name: "held", gpus: []int{0}, cpus: append(cpuRange(48, 63), cpuRange(176, 179)...), mem: 100 * gib},
		},
	},
}

// TestCompatGolden writes, through the exporter's --no-publish path (sysfs
// tree, podresources over a unix socket, the kubelet configuration file),
// the objects nicaffinity's exporter publishes for the compat machines,
// under single-numa-node at container and pod scope. test/compat runs
// NodeResourceTopologyMatch's real Filter and Score on them; this test
// keeps them equal to what the exporter writes today (-update rewrites).
func TestCompatGolden(t *testing.T) {
	for _, m := range compatMachines {
		for _, scope := range []string{"container", "pod"} {
			t.Run(m.name+"-"+scope, func(t *testing.T) {
				got := compatObject(t, m, scope)
				path := filepath.Join("..", "..", "test", "compat", "testdata", fmt.Sprintf("%s-%s.nicaffinity.yaml", m.name, scope))
				golden.Check(t, path, got, *update)
			})
		}
	}
}

func compatObject(t *testing.T, m compatMachine, scope string) []byte {
	t.Helper()
	tree := machines.New(t.TempDir())
	m.build(tree)
	topo, err := discovery.Host{SysfsRoot: tree.Root, NVMLMode: discovery.NVMLOff}.Discover()
	if err != nil {
		t.Fatal(err)
	}
	var cpus []int
	var mem []devices.Memory
	for _, n := range topo.NUMANodes {
		tree.NUMAMemory(n.ID, m.memTotal/1024, nil)
		c, err := topology.ParseCPUList(n.CPUs)
		if err != nil {
			t.Fatal(err)
		}
		for _, cpu := range c {
			if cpu != 0 {
				cpus = append(cpus, cpu)
			}
		}
		mem = append(mem, devices.Memory{Type: "memory", Bytes: m.memAllocatable, NUMANodes: []int{n.ID}})
	}
	if err := tree.Err(); err != nil {
		t.Fatal(err)
	}
	gpu := func(i int) devices.Device {
		g := topo.GPUs[i]
		return devices.Device{Resource: "nvidia.com/gpu", ID: g.PCI.Address, NUMANodes: []int{topology.NUMAOf(g.PCI)}}
	}
	kubelet := podresourcessim.New(filepath.Join(t.TempDir(), "kubelet.sock"))
	var offered []devices.Device
	for i := range topo.GPUs {
		offered = append(offered, gpu(i))
	}
	kubelet.SetAllocatable(offered)
	kubelet.SetAllocatableCPUsMemory(cpus, mem)
	for _, p := range m.held {
		pod := devices.Pod{Namespace: "default", Name: p.name, CPUs: p.cpus}
		for _, g := range p.gpus {
			pod.Devices = append(pod.Devices, gpu(g))
		}
		numa := topology.NUMAOf(topo.GPUs[p.gpus[0]].PCI)
		pod.Memory = []devices.Memory{{Type: "memory", Bytes: p.mem, NUMANodes: []int{numa}}}
		kubelet.SetPodResources(pod)
	}
	if err := kubelet.Start(); err != nil {
		t.Fatal(err)
	}
	defer kubelet.Stop()
	kubeletConfig := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(kubeletConfig, []byte("kind: KubeletConfiguration\ntopologyManagerPolicy: single-numa-node\ntopologyManagerScope: "+scope+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	cmd := commandFor(&options{out: &out})
	cmd.SetArgs([]string{"--node-name=" + m.name, "--sysfs-root=" + tree.Root, "--podresources-socket=" + kubelet.Socket,
		"--no-publish", "--nvml=off", "--kubelet-config=" + kubeletConfig})
	if err := cmd.ExecuteContext(context.Background()); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}
