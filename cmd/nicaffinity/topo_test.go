package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nicaffinity/nicaffinity/pkg/machines"
	"github.com/nicaffinity/nicaffinity/pkg/topology"
	"github.com/nicaffinity/nicaffinity/pkg/topology/nvmlgpu"
	"github.com/nicaffinity/nicaffinity/pkg/topology/smitest"
)

type noNVML struct{}

func (noNVML) Read() (*topology.NVMLData, error) {
	return nil, fmt.Errorf("%w: nvmlInit: ERROR_LIBRARY_NOT_FOUND", nvmlgpu.ErrUnavailable)
}

func h20Tree(t *testing.T) string {
	t.Helper()
	tree := machines.New(t.TempDir())
	machines.H20(tree)
	if err := tree.Err(); err != nil {
		t.Fatal(err)
	}
	return tree.Root
}

func runTopo(t *testing.T, o topoOptions) (string, error) {
	t.Helper()
	var out bytes.Buffer
	if o.output == "" {
		o.output = "text"
	}
	if o.nvml == "" {
		o.nvml = "auto"
	}
	err := o.run(&out, noNVML{})
	return out.String(), err
}

func TestTopoText(t *testing.T) {
	out, err := runTopo(t, topoOptions{sysfsRoot: h20Tree(t)})
	if err != nil {
		t.Fatal(err)
	}
	m, err := smitest.ParseSMIMatrix(out)
	if err != nil {
		t.Fatalf("output does not read as a matrix: %v\n%s", err, out)
	}
	if len(m.Devices) != 19 || m.Devices[18].Name != "mlx5_bond_0" {
		t.Errorf("want 8 GPUs and 11 NICs ending with mlx5_bond_0, got %v", m.Devices)
	}
	if got := m.Cells[6][16].String(); got != "PIX" {
		t.Errorf("GPU6-NIC8 = %s, want PIX", got)
	}
	if !strings.Contains(out, "NVML not used (NVML unavailable") {
		t.Errorf("output does not say NVML was not used:\n%s", out)
	}
}

func TestTopoJSON(t *testing.T) {
	out, err := runTopo(t, topoOptions{sysfsRoot: h20Tree(t), output: "json"})
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Source  string
		NVML    bool
		Notes   []string
		Devices []topology.MatrixDevice
		Cells   [][]string
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if got.Source != "sysfs" || got.NVML || len(got.Notes) == 0 {
		t.Errorf("source %q nvml %v notes %v", got.Source, got.NVML, got.Notes)
	}
	wantNIC0 := topology.MatrixDevice{Label: "NIC0", Name: "mlx5_0", BusID: "0000:18:00.0"}
	if diff := cmp.Diff(wantNIC0, got.Devices[8]); diff != "" {
		t.Errorf("NIC0 (-want,+got):\n%s", diff)
	}
	if got.Cells[0][8] != "PIX" || got.Cells[0][0] != "X" || got.Cells[0][12] != "SYS" {
		t.Errorf("GPU0 row = %v", got.Cells[0])
	}
}

func TestTopoNCCLXML(t *testing.T) {
	path := filepath.Join("..", "..", "pkg", "profiles", "nccl-xml", "a100pcie-2gpu-1cx6dx-icelake_nccl-issue-2397.xml")
	out, err := runTopo(t, topoOptions{ncclXML: path})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "GPU0\t X \tSYS\tPHB\tPHB") || !strings.Contains(out, "NCCL XML has no host-bridge identity") {
		t.Errorf("unexpected output:\n%s", out)
	}
}

func TestTopoErrors(t *testing.T) {
	truncated := filepath.Join(t.TempDir(), "cut.xml")
	if err := os.WriteFile(truncated, []byte(`<system><cpu numaid="0">`), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		o       topoOptions
		wantErr string
	}{
		{"bad output", topoOptions{output: "yaml"}, `--output "yaml"`},
		{"bad nvml mode", topoOptions{nvml: "maybe"}, `--nvml: NVML mode "maybe"`},
		{"missing xml", topoOptions{ncclXML: "/nonexistent/topo.xml"}, "/nonexistent/topo.xml"},
		{"truncated xml", topoOptions{ncclXML: truncated}, truncated + ": NCCL topology XML: XML syntax error"},
		{"unknown profile", topoOptions{profile: "dgx-z9000"}, `no profile "dgx-z9000"; known: `},
		{"missing sysfs", topoOptions{sysfsRoot: "/nonexistent/sys"}, "sysfs root /nonexistent/sys"},
		{"nvml required", topoOptions{sysfsRoot: "", nvml: "on"}, "NVML unavailable"},
		{"xml and profile", topoOptions{ncclXML: "a", profile: "b"}, "exclusive"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.o.sysfsRoot == "" && tc.name == "nvml required" {
				tc.o.sysfsRoot = h20Tree(t)
			}
			_, err := runTopo(t, tc.o)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("error = %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

// TestTopoCatalogue: one listing names every machine --machine takes (the
// shapes, then the 13 bundled profiles as profile/<name>), and --profile
// NAME is --machine profile/NAME.
func TestTopoCatalogue(t *testing.T) {
	out, err := runTopo(t, topoOptions{list: true})
	if err != nil {
		t.Fatal(err)
	}
	names := strings.Fields(out)
	profiles := 0
	for _, n := range names {
		byMachine, err := runTopo(t, topoOptions{machine: n})
		if err != nil {
			t.Errorf("--machine %s: %v", n, err)
		}
		if p, ok := strings.CutPrefix(n, "profile/"); ok {
			profiles++
			if byProfile, err := runTopo(t, topoOptions{profile: p}); err != nil || byProfile != byMachine {
				t.Errorf("--profile %s differs from --machine %s (%v)", p, n, err)
			}
		}
	}
	if profiles != 13 || len(names) < 20 {
		t.Fatalf("want the shapes and 13 bundled profiles, got %v", names)
	}
}

// TestTopoNoGPU: a host without GPUs says what it found, not an empty matrix.
func TestTopoNoGPU(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "bus", "pci", "devices"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := runTopo(t, topoOptions{sysfsRoot: root})
	if err == nil || !strings.Contains(err.Error(), "no GPU found (0 RDMA NICs") {
		t.Errorf("err = %v, want one saying no GPU was found", err)
	}
}
