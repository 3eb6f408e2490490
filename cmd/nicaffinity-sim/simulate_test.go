package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nicaffinity/nicaffinity/internal/sim"
)

// TestGangColumnOnlyWithJobs: the gangs+rails column runs only where the
// workload has multi-pod jobs (elsewhere it would repeat required+proxy
// pod for pod), unless --columns names it.
func TestGangColumnOnlyWithJobs(t *testing.T) {
	for _, tc := range []struct {
		scenario string
		columns  []string
		want     bool
	}{
		{"default", nil, false},
		{"backlog", nil, false},
		{"jobs", nil, true},
		{"default", []string{"gangs+rails", "default-scheduler"}, true},
	} {
		o := &simulateOptions{runs: 1, columns: tc.columns}
		var progress bytes.Buffer
		_, cols, err := o.plans(sim.Scenarios[tc.scenario], &progress)
		if err != nil {
			t.Fatal(err)
		}
		if got := slices.ContainsFunc(cols, func(c sim.Column) bool { return c.Gang }); got != tc.want {
			t.Errorf("%s, --columns %v: gang column %v, want %v (progress %q)", tc.scenario, tc.columns, got, tc.want, progress.String())
		}
		if !tc.want && !strings.Contains(progress.String(), "gangs+rails, default-scheduler+gangs left out: no multi-pod jobs") {
			t.Errorf("%s: progress %q does not say why gangs+rails is left out", tc.scenario, progress.String())
		}
	}
	// Several scenarios: each keeps its own columns.
	o := &simulateOptions{runs: 1}
	_, cols, err := o.prepare([]sim.Scenario{sim.Scenarios["default"], sim.Scenarios["jobs"]}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	gang := func(cs []sim.Column) bool { return slices.ContainsFunc(cs, func(c sim.Column) bool { return c.Gang }) }
	if len(cols) != 2 || gang(cols[0]) || !gang(cols[1]) {
		t.Errorf("default then jobs: gang column in each %v, want in jobs only", []bool{gang(cols[0]), len(cols) > 1 && gang(cols[1])})
	}
}

// TestSimulateRefusesBadInput: bad flags and specs fail before any control
// plane starts, with errors that name the file, line and field.
func TestSimulateRefusesBadInput(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	badCluster := write("cluster.yaml", "pools:\n- name: h\n  count: -2\n  machine: half-nic-8gpu-2nic\n")
	badWorkload := write("workload.yaml", "jobs: 4\nload: {from: 0.2, to: 30}\n")
	badTrace := write("trace.csv", "0s,1,8,2h,rdma\n1h,1,12,2h,rdma\n")
	trace := write("good.csv", "0s,1,8,2h,rdma\n")
	noVFs := write("novf.yaml", "pools:\n- {name: h, count: 1, machine: half-nic-8gpu-2nic}\n")
	profile := write("profile.yaml", "pools:\n- {name: ndv2, count: 1, machine: profile/azure-ndv2-v100-8gpu}\n")
	eightNoVF := write("eight.yaml", "jobs: 4\nsizes: {8: 1}\nvfShare: 0\n")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"simulate", "-o", "xml"}, `--output "xml": want text or json`},
		{[]string{"simulate", "--cluster", badCluster}, badCluster + ":3: pools[0].count: -2: want a positive number of nodes"},
		{[]string{"simulate", "--workload", badWorkload}, badWorkload + ":2: load.to: 30: want a GPU load in (0, 10]"},
		{[]string{"simulate", "--trace", badTrace}, badTrace + ":2: gpus: \"12\": want 1 to 8 GPUs a pod"},
		{[]string{"simulate", "--trace", trace, "--runs", "3"}, "--trace replays one job list, the same in every run: give --runs 1"},
		{[]string{"simulate", "--trace", filepath.Join(dir, "absent.csv")}, "absent.csv: no such file"},
		{[]string{"simulate", "--cluster", filepath.Join(dir, "absent.yaml")}, "absent.yaml: no such file"},
		{[]string{"simulate", "--cluster", noVFs}, "vfShare 0.1, but no node of the cluster has SR-IOV VFs"},
		{[]string{"simulate", "--runs", "0"}, "--runs 0: want 1 to 100"},
		{[]string{"simulate", "--parallel", "17"}, "--parallel 17: want 1 to 16"},
		{[]string{"simulate", "--scenario", "huge"}, `--scenario "huge": want backlog or default or jobs or large or xlarge`},
		{[]string{"simulate", "--alignment-wait", "forever"}, `--alignment-wait: annotation nicaffinity.io/alignment-wait="forever": want a duration such as 10m`},
		{[]string{"simulate", "--alignment-wait", "48h"}, `--alignment-wait: annotation nicaffinity.io/alignment-wait="48h": must be between 1s and 24h0m0s`},
		{[]string{"simulate", "--columns", "required+proxy,fastest"}, `--columns: no column "fastest" (known: bounded+proxy, required+proxy, preferred+proxy, required (advice), gangs+rails, default-scheduler+gangs, default-scheduler, dra generated, dra pcieRoot, dra unconstrained)`},
		{[]string{"simulate", "--dra", "--cluster", profile, "--workload", eightNoVF}, "pool ndv2: DRA columns need machines read from sysfs: profile/azure-ndv2-v100-8gpu comes from profile azure-ndv2-v100-8gpu, which names no PCIe root complexes"},
		{[]string{"simulate", "--dra", "--cluster", noVFs, "--workload", eightNoVF}, "column dra generated, jobs of 8 GPUs with a NIC: 8 GPUs, each with an aligned NIC: half-nic-8gpu-2nic has 4 such GPUs"},
		{[]string{"bench", "--nodes", "0"}, "--nodes and --pods must be positive"},
		{[]string{"bench", "-o", "yaml"}, `--output "yaml": want text or json`},
		{[]string{"bench", "--rounds", "0"}, "--rounds 0: want 1 to 100"},
		{[]string{"bench", "--workload", "everything", "--nodes", "1", "--pods", "1", "--micro=false"}, `workload "everything": want gpu or mixed`},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			cmd := newRootCommand()
			var out, errOut bytes.Buffer
			cmd.SetOut(&out)
			cmd.SetErr(&errOut)
			cmd.SetArgs(tc.args)
			err := cmd.Execute()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error = %v, want %q", err, tc.want)
			}
			if out.Len() > 0 {
				t.Errorf("printed a report: %s", out.String())
			}
		})
	}
}

// TestTraceSaysLoadAndMaxWait: --trace says which maxWait it applies and,
// when the trace asks more GPU-hours than the cluster gives over its
// arrivals, by how much; a light trace gets no load warning.
func TestTraceSaysLoadAndMaxWait(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, rows int, gap string) string {
		var b strings.Builder
		d, _ := time.ParseDuration(gap)
		for i := range rows {
			fmt.Fprintf(&b, "%s,1,8,2h,rdma\n", time.Duration(i)*d)
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		trace     string
		wantHeavy bool
	}{{write("heavy.csv", 60, "1m"), true}, {write("light.csv", 4, "3h"), false}} {
		o := &simulateOptions{runs: 1, trace: tc.trace}
		var progress bytes.Buffer
		if _, _, err := o.plans(sim.Scenarios["default"], &progress); err != nil {
			t.Fatal(err)
		}
		out := progress.String()
		if !strings.Contains(out, "maxWait 3h0m0s applies") {
			t.Errorf("%s: progress %q does not name the maxWait applied", tc.trace, out)
		}
		if got := strings.Contains(out, "times what the cluster's"); got != tc.wantHeavy {
			t.Errorf("%s: load warning %v, want %v (progress %q)", tc.trace, got, tc.wantHeavy, out)
		}
	}
}

// TestReportSaysReplaySpeed: the report says how many pods it replayed,
// in how long and on which API, apart from the workload's figures.
func TestReportSaysReplaySpeed(t *testing.T) {
	out, err := simulate(t, "--scenario", "default", "--runs", "1", "--columns", "default-scheduler")
	if err != nil {
		t.Fatal(err)
	}
	// The default scenario's first seed: 64 single-pod jobs, one column.
	if !regexp.MustCompile(`Replayed 64 pods in \d+ s on the in-memory API, \d+ pods a second`).MatchString(out) {
		t.Errorf("the report does not say how fast it replayed:\n%s", out)
	}
}
