package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	resourcev1 "k8s.io/api/resource/v1"
	"sigs.k8s.io/yaml"

	"github.com/nicaffinity/nicaffinity/pkg/dra"
	"github.com/nicaffinity/nicaffinity/pkg/machines"
	"github.com/nicaffinity/nicaffinity/pkg/topology"
)

func runCLI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := newRootCommand()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetArgs(args)
	err := cmd.Execute()
	return out.String(), err
}

func TestTopoDRA(t *testing.T) {
	out, err := runCLI(t, "topo", "--dra", "--machine", "hgx-h100-8gpu-8nic")
	if err != nil || !strings.Contains(out, "DRA pcieRoot on hgx-h100-8gpu-8nic: enough") {
		t.Errorf("HGX H100: %v\n%s", err, out)
	}
	out, err = runCLI(t, "topo", "--dra", "--machine", "half-nic-8gpu-2nic", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var c dra.Check
	if err := json.Unmarshal([]byte(out), &c); err != nil || c.Enough || len(c.Unaligned) != 12 || c.SameRoot != 16 {
		t.Errorf("half-NIC JSON: %v %+v", err, c)
	}
	out, err = runCLI(t, "topo", "--dra", "--profile", "oci-bm-gpu-h100-8-8gpu-8x2portcx7")
	if err != nil || !strings.Contains(out, "cannot tell") {
		t.Errorf("an NCCL XML profile: %v\n%s", err, out)
	}
}

// TestDRAClaims: the template decodes strictly as a resource.k8s.io/v1
// ResourceClaimTemplate and aligns as the shape allows.
func TestDRAClaims(t *testing.T) {
	out, err := runCLI(t, "dra", "claims", "--machine", "dgx-a100-8gpu-10nic", "--gpus", "4", "--gpus-per-nic", "2", "--name", "four", "-n", "ml")
	if err != nil {
		t.Fatal(err)
	}
	var tmpl resourcev1.ResourceClaimTemplate
	if err := yaml.UnmarshalStrict([]byte(out), &tmpl); err != nil {
		t.Fatalf("not a ResourceClaimTemplate: %v\n%s", err, out)
	}
	d := tmpl.Spec.Spec.Devices
	if tmpl.Name != "four" || tmpl.Namespace != "ml" || len(d.Requests) != 4 || d.Requests[0].Exactly.Count != 2 || string(*d.Constraints[0].MatchAttribute) != dra.AttrPCIeRoot {
		t.Errorf("template %+v", tmpl)
	}
	if !strings.HasPrefix(out, "# dgx-a100-8gpu-10nic: 4 GPUs, 2 per NIC, aligned at PXB or closer by pcieRoot.") {
		t.Errorf("header: %s", strings.SplitN(out, "\n", 2)[0])
	}

	// Several machines, one template; each of the three shapes of claim
	// decodes strictly.
	for _, tc := range []struct {
		args   []string
		header string
	}{
		{[]string{"--machine", "hgx-h100-8gpu-8nic,half-nic-8gpu-2nic", "--derived"}, "# hgx-h100-8gpu-8nic, half-nic-8gpu-2nic: 1 GPUs, 1 per NIC, aligned at PXB or closer by derived."},
		{[]string{"--machine", "hgx-h100-8gpu-8nic", "--machine", "half-nic-8gpu-2nic", "--shared-nics", "--gpus", "2"}, "# hgx-h100-8gpu-8nic, half-nic-8gpu-2nic: 2 GPUs with every NIC (shared), aligned at PXB or closer by selector."},
		{[]string{"--machine", "half-nic-8gpu-2nic", "--no-nic", "--gpus", "2"}, "# half-nic-8gpu-2nic: 2 GPUs for a job without a NIC, those past PXB first, by selector."},
	} {
		out, err := runCLI(t, append([]string{"dra", "claims"}, tc.args...)...)
		if err != nil {
			t.Errorf("%v: %v", tc.args, err)
			continue
		}
		if err := yaml.UnmarshalStrict([]byte(out), &resourcev1.ResourceClaimTemplate{}); err != nil {
			t.Errorf("%v: not a ResourceClaimTemplate: %v", tc.args, err)
		}
		if h := strings.SplitN(out, "\n", 2)[0]; h != tc.header {
			t.Errorf("%v: header %q, want %q", tc.args, h, tc.header)
		}
	}
}

func TestDRAClaimsBadInput(t *testing.T) {
	gpuOnly := filepath.Join(t.TempDir(), "sys")
	if _, err := machines.Discover(gpuOnly, func(tr *machines.Tree) { tr.GPU("pci0000:00/0000:00:01.0/0000:01:00.0", 0, "0-7") }); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--machine", "dgx-z100"}, `unknown machine "dgx-z100": want one of `},
		{[]string{"--sysfs-root", gpuOnly}, "has no RDMA NIC"},
		{[]string{"--machine", "hgx-h100-8gpu-8nic", "--gpus", "4", "--gpus-per-nic", "4"}, "4 GPUs per NIC is larger than any switch"},
		{[]string{"--machine", "half-nic-8gpu-2nic"}, "pcieRoot is not enough"},
		{[]string{"--machine", "hgx-h100-8gpu-8nic,half-nic-8gpu-2nic"}, "on half-nic-8gpu-2nic pcieRoot is not enough"},
		{[]string{"--machine", "hgx-h100-8gpu-8nic,dgx-z100"}, `unknown machine "dgx-z100"`},
		{[]string{"--machine", "half-nic-8gpu-2nic", "--gpus", "6", "--derived"}, "6 groups of 1 GPUs, each with its own aligned NIC: half-nic-8gpu-2nic has room for 2"},
		{[]string{"--machine", "half-nic-8gpu-2nic", "--gpus", "6", "--derived", "--shared-nics"}, "6 GPUs, each with an aligned NIC: half-nic-8gpu-2nic has 4 such GPUs"},
		{[]string{"--machine", "hgx-h100-8gpu-8nic", "--max-level", "CLOSE"}, "--max-level"},
		{[]string{"--machine", "hgx-h100-8gpu-8nic", "-o", "xml"}, `--output "xml"`},
		{[]string{"--machine", "hgx-h100-8gpu-8nic", "--sysfs-root", gpuOnly}, "exclusive"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			_, err := runCLI(t, append([]string{"dra", "claims"}, tc.args...)...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// TestDRADocsAgree: docs/dra.md's table says, per built-in shape, what
// topo --dra says.
func TestDRADocsAgree(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "dra.md"))
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| `([a-z0-9-]+)` \\| (yes|no) \\| (\\d+) \\| (\\d+) \\|")
	rows := row.FindAllStringSubmatch(string(doc), -1)
	if len(rows) != len(machines.Shapes) {
		t.Fatalf("docs/dra.md has %d shape rows, there are %d shapes", len(rows), len(machines.Shapes))
	}
	for _, r := range rows {
		topo, err := loadMachine(r[1])
		if err != nil {
			t.Fatal(err)
		}
		c := dra.CheckTopology(r[1], topo, topology.LevelP2C)
		got := []string{map[bool]string{true: "yes", false: "no"}[c.Enough], itoa(c.SameRoot), itoa(len(c.Unaligned))}
		if strings.Join(got, " ") != strings.Join(r[2:5], " ") {
			t.Errorf("docs/dra.md says %s: %v; topo --dra says %v", r[1], r[2:5], got)
		}
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

func TestVersionFlag(t *testing.T) {
	out, err := runCLI(t, "--version")
	if err != nil || !strings.HasPrefix(out, "nicaffinity version v0.37.") || !strings.Contains(out, "Kubernetes 1.37") {
		t.Errorf("--version: %v %q", err, out)
	}
}

// TestCLITakesCatalogueNames: topo --machine reads every machine of the
// catalogue, and dra claims takes every sysfs shape (the names the
// simulator's pools take: TestPoolsTakeCatalogueNames).
func TestCLITakesCatalogueNames(t *testing.T) {
	for _, n := range machines.Names() {
		if _, err := runCLI(t, "topo", "--machine", n); err != nil {
			t.Errorf("topo --machine %s: %v", n, err)
		}
	}
	for _, n := range machines.ShapeNames() {
		if _, err := runCLI(t, "dra", "claims", "--machine", n); err != nil && strings.Contains(err.Error(), "unknown machine") {
			t.Errorf("dra claims --machine %s: %v", n, err)
		}
	}
}
