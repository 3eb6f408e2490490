package sim

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestParseSpecs(t *testing.T) {
	c, err := ParseCluster([]byte("pools:\n- {name: h, count: 2, machine: hgx-h100-8gpu-8nic}\n- {name: x, count: 1, machine: profile/aws-p4d-24xlarge-a100-8gpu-4efa}\n"))
	if err != nil || len(c.Pools) != 2 {
		t.Fatalf("%v %+v", err, c)
	}
	for spec, want := range map[string]string{
		"pools:\n- {name: h, count: 0, machine: half-nics}\n":  "positive count",
		"pools:\n- {name: h, count: 1, machine: dgx-z}\n":      `unknown machine "dgx-z"`,
		"pools:\n- {name: h, count: 1, machine: profile/no}\n": `no profile "no"`,
		"pools: 3\n": "cluster spec",
		"pools:\n- {name: h, count: 1, machine: half-nics, gpus: 9}\n": `unknown field "gpus"`,
	} {
		if _, err := ParseCluster([]byte(spec)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseCluster(%q) = %v, want %q", spec, err, want)
		}
	}
	for spec, want := range map[string]string{
		"jobs: 0\n":                           "jobs > 0",
		"rdmaShare: 2\n":                      "rdmaShare",
		"sizes: {two: 1}\n":                   `"two"`,
		"minDuration: 10s\nmaxDuration: 5s\n": "minDuration <= maxDuration",
	} {
		if _, err := ParseWorkload([]byte(spec)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseWorkload(%q) = %v, want %q", spec, err, want)
		}
	}
	jobs := DefaultWorkload.draw()
	again := DefaultWorkload.draw()
	if len(jobs) != 40 || jobs[7] != again[7] {
		t.Errorf("draw is not deterministic for a seed")
	}
}

// TestRun replays a small workload through both profiles on the half-NIC
// shape and checks the report adds up. (Which scheduler does better on so
// few jobs depends on the device plugin's NIC-blind choice: see the note in
// docs/simulate.md.)
func TestRun(t *testing.T) {
	c := ClusterSpec{Pools: []Pool{{Name: "half", Count: 2, Machine: "half-nics"}}}
	w := WorkloadSpec{Jobs: 6, Sizes: map[string]int{"1": 1, "2": 1}, RDMAShare: 1,
		Interarrival: metav1.Duration{Duration: 200 * time.Millisecond}, MinDuration: metav1.Duration{Duration: 2 * time.Second},
		MaxDuration: metav1.Duration{Duration: 3 * time.Second}, Seed: 3}
	var got []Result
	for _, s := range []string{"nicaffinity-scheduler", "default-scheduler"} {
		r, err := Run(context.Background(), c, w, s, nil)
		if err != nil {
			t.Fatal(err)
		}
		if r.Scheduled != 6 || r.RDMAJobs != 6 {
			t.Errorf("%s: %+v", s, r)
		}
		got = append(got, r)
	}
	t.Logf("GPUDirect share: nicaffinity %.2f, default %.2f", got[0].GPUDirect, got[1].GPUDirect)
	for _, r := range got {
		total := 0
		for _, n := range r.Levels {
			total += n
		}
		if total != r.RDMAJobs {
			t.Errorf("%s: levels %v add up to %d, want %d RDMA jobs", r.Scheduler, r.Levels, total, r.RDMAJobs)
		}
	}
	var b strings.Builder
	Format(&b, got)
	if !strings.Contains(b.String(), "GPUDirect-eligible") {
		t.Errorf("report:\n%s", b.String())
	}
}
