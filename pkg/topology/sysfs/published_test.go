package sysfs_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nicaffinity/nicaffinity/pkg/machines"
	"github.com/nicaffinity/nicaffinity/pkg/topology"
	"github.com/nicaffinity/nicaffinity/pkg/topology/nvmlgpu"
	"github.com/nicaffinity/nicaffinity/pkg/topology/nvmlgpu/nvmltest"
	"github.com/nicaffinity/nicaffinity/pkg/topology/smitest"
	"github.com/nicaffinity/nicaffinity/pkg/topology/sysfs"
)

func publishedMatrix(t *testing.T, file string) *topology.Matrix {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "testdata", "nvidia-smi-topo", file)) // file may climb to other testdata dirs
	if err != nil {
		t.Fatal(err)
	}
	m, err := smitest.ParseSMIMatrix(string(b))
	if err != nil {
		t.Fatalf("parsing published %s: %v", file, err)
	}
	return m
}

// cellsByName turns a matrix into label -> (label -> cell), with NICs named by
// their RDMA device, so two matrices compare cell by cell and their NIC order
// is checked separately.
type cell struct{ Row, Col, Level string }

func cells(m *topology.Matrix, skipGPUPairs bool) []cell {
	name := func(d topology.MatrixDevice) string {
		if d.IsGPU() {
			return d.Label
		}
		return d.Label + "=" + d.Name
	}
	var out []cell
	for i, a := range m.Devices {
		for j, b := range m.Devices {
			if skipGPUPairs && a.IsGPU() && b.IsGPU() && i != j {
				continue
			}
			out = append(out, cell{name(a), name(b), m.Cells[i][j].String()})
		}
	}
	return out
}

func affinity(m *topology.Matrix) []topology.MatrixDevice {
	var out []topology.MatrixDevice
	for _, d := range m.Devices {
		if d.IsGPU() {
			out = append(out, topology.MatrixDevice{Label: d.Label, CPUAffinity: d.CPUAffinity, NUMAAffinity: d.NUMAAffinity, GPUNUMAID: d.GPUNUMAID})
		}
	}
	return out
}

// TestPublishedMatrices builds, for each published `nvidia-smi topo -m`, a sysfs
// tree with that machine's shape and checks every cell we compute against the
// published file: from sysfs alone (GPU pairs are PCIe there, so they are left
// out) and with NVML (a mock carrying the machine's bus IDs and NVLinks), where
// the whole matrix must match.
func TestPublishedMatrices(t *testing.T) {
	for _, machine := range machines.Machines {
		t.Run(machine.Name, func(t *testing.T) {
			want := publishedMatrix(t, machine.Published)
			tree := machines.New(t.TempDir())
			machine.Build(tree)
			if err := tree.Err(); err != nil {
				t.Fatal(err)
			}
			reader := sysfs.New(sysfs.WithRoot(tree.Root))
			host, err := reader.Read()
			if err != nil {
				t.Fatal(err)
			}

			t.Run("sysfs", func(t *testing.T) {
				topo, err := topology.FromHostData(host)
				if err != nil {
					t.Fatal(err)
				}
				if topo.NVML {
					t.Error("topology says NVML was used; it was not")
				}
				got := topo.Matrix()
				if diff := cmp.Diff(cells(want, true), cells(got, true)); diff != "" {
					t.Errorf("matrix differs from %s (-want,+got):\n%s", machine.Published, diff)
				}
				if diff := cmp.Diff(affinity(want), affinity(got)); diff != "" {
					t.Errorf("affinity columns differ (-want,+got):\n%s", diff)
				}
			})

			t.Run("sysfs+nvml", func(t *testing.T) {
				topo, err := topology.FromHostData(withMockNVML(t, host, machine.NVLinks))
				if err != nil {
					t.Fatal(err)
				}
				got := topo.Matrix()
				if diff := cmp.Diff(cells(want, false), cells(got, false)); diff != "" {
					t.Errorf("matrix differs from %s (-want,+got):\n%s", machine.Published, diff)
				}
				// The text we print must read back as the same matrix.
				back, err := smitest.ParseSMIMatrix(got.Format())
				if err != nil {
					t.Fatalf("reading our own output: %v\n%s", err, got.Format())
				}
				if diff := cmp.Diff(cells(got, false), cells(back, false)); diff != "" {
					t.Errorf("Format does not read back (-printed,+parsed):\n%s", diff)
				}
			})
		})
	}
}

// withMockNVML adds what NVML would say about host's GPUs: a go-nvml mock with
// their bus IDs (in PCI order, as NVML numbers them) and links NVLinks from
// every GPU into NVSwitches.
func withMockNVML(t *testing.T, host topology.HostData, links int) topology.HostData {
	t.Helper()
	plain, err := topology.FromHostData(host)
	if err != nil {
		t.Fatal(err)
	}
	var busIDs []string
	for _, g := range plain.GPUs {
		busIDs = append(busIDs, g.PCI.Address)
	}
	mock, err := nvmltest.NVSwitchServer(busIDs, links)
	if err != nil {
		t.Fatal(err)
	}
	if host.NVML, err = nvmlgpu.New(nvmlgpu.WithNVML(mock)).Read(); err != nil {
		t.Fatal(err)
	}
	return host
}
