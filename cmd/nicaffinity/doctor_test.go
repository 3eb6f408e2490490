package main

import (
	"encoding/json"
	"errors"
	"flag"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nicaffinity/nicaffinity/internal/golden"
	"github.com/nicaffinity/nicaffinity/pkg/apis/config"
	"github.com/nicaffinity/nicaffinity/pkg/doctor"
	"github.com/nicaffinity/nicaffinity/pkg/machines"
	"github.com/nicaffinity/nicaffinity/pkg/machines/machinestest"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata")

func runDoctor(t *testing.T, args ...string) (string, error) {
	t.Helper()
	return runCLI(t, append([]string{"doctor"}, args...)...)
}

// tree builds a machine under a temporary directory.
func tree(t *testing.T, build func(*machines.Tree)) string {
	t.Helper()
	tr := machines.New(t.TempDir())
	build(tr)
	if err := tr.Err(); err != nil {
		t.Fatal(err)
	}
	return tr.Root
}

func doctorNode(t *testing.T, root string, extra ...string) (doctor.Report, error) {
	t.Helper()
	out, err := runDoctor(t, append([]string{"node", "--sysfs-root", root, "--nvml", "off", "--kernel-release", "6.8.0-45-generic", "-o", "json"}, extra...)...)
	var r doctor.Report
	if jerr := json.Unmarshal([]byte(out), &r); jerr != nil {
		t.Fatalf("output is not a report: %v\n%s", jerr, out)
	}
	return r, err
}

// TestDoctorNodeFixtures: each broken state gives its finding, at its
// layer, with its fix, and the layers above it are not checked.
func TestDoctorNodeFixtures(t *testing.T) {
	tests := []struct {
		breakage string
		extra    []string
		want     doctor.Check // Detail and Fix: substrings
	}{
		{breakage: "acs-redirect", want: doctor.Check{Layer: doctor.LayerGPUDirect, Name: "ACS on GPU-NIC paths", Status: doctor.Fail,
			Detail: "ACS redirect on 0000:14:00.0 (GPU 0-mlx5_0)", Fix: "setpci -s 0000:14:00.0 ECAP_ACS+0x6.w=0000"}},
		{breakage: "no-peermem", want: doctor.Check{Layer: doctor.LayerGPUDirect, Name: "nvidia-peermem or dma-buf", Status: doctor.Fail,
			Detail: "nvidia-peermem not loaded, and dma-buf not usable: the nvidia kernel module is the proprietary one", Fix: "modprobe nvidia-peermem"}},
		{breakage: "port-down", want: doctor.Check{Layer: doctor.LayerPorts, Name: "mlx5_0 port 1", Status: doctor.Fail,
			Detail: "DOWN, physical Disabled", Fix: "check the cable and the switch port (ibstat mlx5_0)"}},
		{breakage: "roce-no-v2-gid", want: doctor.Check{Layer: doctor.LayerPorts, Name: "mlx5_0 port 1", Status: doctor.Fail,
			Detail: "no RoCE v2 GID", Fix: "give net-mlx5_0 an IP address"}},
		{breakage: "ib-port-init", want: doctor.Check{Layer: doctor.LayerPorts, Name: "mlx5_0 port 1", Status: doctor.Fail,
			Detail: "INIT, physical LinkUp: the link is up but no subnet manager has configured the port", Fix: "start a subnet manager"}},
		{breakage: "no-dev-infiniband", want: doctor.Check{Layer: doctor.LayerHost, Name: "verbs devices (/dev/infiniband)", Status: doctor.Fail,
			Detail: "no uverbs device for mlx5_0, mlx5_1", Fix: "modprobe ib_uverbs"}},
		{breakage: "roce-no-v2-gid", extra: []string{"--link-layer", "InfiniBand"}, want: doctor.Check{Layer: doctor.LayerPorts, Name: "mlx5_0 port 1", Status: doctor.Fail,
			Detail: "link layer Ethernet, want InfiniBand", Fix: "mlxconfig -d 0000:18:00.0 set LINK_TYPE_P1=1"}},
	}
	if len(tests) < len(machinestest.Breakages) {
		t.Fatalf("%d breakages, %d cases: every fixture needs its finding", len(machinestest.Breakages), len(tests))
	}
	for _, tc := range tests {
		t.Run(tc.breakage+strings.Join(tc.extra, ""), func(t *testing.T) {
			r, err := doctorNode(t, tree(t, machinestest.ReadyHGXH100(tc.breakage)), tc.extra...)
			if !errors.Is(err, errFailed) {
				t.Errorf("err = %v, want the failure exit", err)
			}
			if r.FailedLayer != tc.want.Layer {
				t.Errorf("failed layer %q, want %q", r.FailedLayer, tc.want.Layer)
			}
			var got *doctor.Check
			for i, c := range r.Checks {
				if c.Layer == tc.want.Layer && c.Name == tc.want.Name && c.Status == tc.want.Status {
					got = &r.Checks[i]
				}
			}
			if got == nil || !strings.Contains(got.Detail, tc.want.Detail) || !strings.Contains(got.Fix, tc.want.Fix) {
				t.Fatalf("want a %s check %q at %q with detail %q and fix %q; report:\n%+v", tc.want.Status, tc.want.Name, tc.want.Layer, tc.want.Detail, tc.want.Fix, r.Checks)
			}
			after := false
			for _, c := range r.Checks {
				if c.Layer == tc.want.Layer {
					after = true
					continue
				}
				if after && c.Status != doctor.Skipped {
					t.Errorf("layer %q after the failing one was checked: %+v", c.Layer, c)
				}
			}
		})
	}
}

// TestDoctorNodeText: a ready machine and an ACS-broken one, as the
// terminal shows them (golden files).
func TestDoctorNodeText(t *testing.T) {
	for _, tc := range []struct {
		name     string
		breakage []string
		wantErr  bool
	}{
		{"ready", nil, false},
		{"acs-redirect", []string{"acs-redirect"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := tree(t, machinestest.ReadyHGXH100(tc.breakage...))
			out, err := runDoctor(t, "node", "--sysfs-root", root, "--nvml", "off", "--kernel-release", "6.8.0-45-generic")
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v", err)
			}
			out = strings.ReplaceAll(out, root, "<tree>")
			golden.Check(t, filepath.Join("testdata", "doctor-node-"+tc.name+".txt"), []byte(out), *update)
		})
	}
}

// TestDoctorNodeUnknowns: a tree without module, IOMMU or config-space data
// (an unprivileged view) gives unknowns, never a guess and never a failure.
func TestDoctorNodeUnknowns(t *testing.T) {
	r, err := doctorNode(t, tree(t, machines.HGXH100))
	if err != nil {
		t.Fatalf("err = %v; report %+v", err, r)
	}
	unknown := map[string]bool{}
	for _, c := range r.Checks {
		if c.Status == doctor.Unknown {
			unknown[c.Name] = true
		}
	}
	for _, name := range []string{"nvidia kernel module", "nvidia-peermem or dma-buf", "ACS on GPU-NIC paths", "IOMMU"} {
		if !unknown[name] {
			t.Errorf("check %q is not unknown: %+v", name, r.Checks)
		}
	}
}

func TestDoctorBadFlags(t *testing.T) {
	root := tree(t, machines.HGXH100)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"node", "--sysfs-root", root, "-o", "yaml"}, `--output "yaml"`},
		{[]string{"node", "--sysfs-root", root, "--max-level", "CLOSE"}, "--max-level"},
		{[]string{"node", "--sysfs-root", root, "--link-layer", "Infiniband"}, `--link-layer "Infiniband"`},
		{[]string{"node", "--sysfs-root", filepath.Join(root, "nowhere")}, "nowhere"},
		{[]string{"pair", "a", "a", "--nic", "mlx5_0", "--rate-gbps", "400"}, "a pair test needs two nodes"},
		{[]string{"pair", "a", "b", "--nic", "mlx5_0; rm -rf /", "--rate-gbps", "400"}, "not an RDMA device name"},
		{[]string{"pair", "a", "b", "--nic", "mlx5_0", "--rate-gbps", "-1"}, "--rate-gbps -1"},
		{[]string{"pod"}, "accepts 1 arg"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			_, err := runDoctor(t, tc.args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// TestDoctorPairOffline: with the NIC and rate given, pair needs no cluster;
// its pods are real Pod objects and the pass mark is 90% of line rate.
func TestDoctorPairOffline(t *testing.T) {
	t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "none"))
	out, err := runDoctor(t, "pair", "gpu-a", "gpu-b", "--nic", "mlx5_3", "--rate-gbps", "400", "--roce", "--gid-index", "5")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"kubernetes.io/hostname: gpu-a", "kubernetes.io/hostname: gpu-b", "hostNetwork: true", "- IPC_LOCK", "rdma/hca: \"1\"",
		"ib_send_bw -x 5 -d mlx5_3 -F --report_gbits", "$SERVER_IP", "at least 360 Gb/s (90% of 400 Gb/s line rate)", "show_gids | grep v2",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// TestMaxLevelDefaults: every --max-level of the CLI defaults to the
// scheduler's level (pkg/apis/config), so doctor and dra judge "aligned"
// as the scheduler places.
func TestMaxLevelDefaults(t *testing.T) {
	root := newRootCommand()
	for _, path := range [][]string{{"doctor", "node"}, {"dra", "claims"}} {
		cmd, _, err := root.Find(path)
		if err != nil {
			t.Fatalf("%v: %v", path, err)
		}
		f := cmd.Flags().Lookup("max-level")
		if f == nil {
			t.Fatalf("%v has no --max-level", path)
		}
		if f.DefValue != config.DefaultMaxLevel {
			t.Errorf("%s --max-level defaults to %s; the scheduler's is %s", strings.Join(path, " "), f.DefValue, config.DefaultMaxLevel)
		}
	}
}
