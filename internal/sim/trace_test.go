package sim

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestParseTrace(t *testing.T) {
	h := func(v float64) time.Duration { return time.Duration(v * float64(time.Hour)) }
	got, err := ParseTrace("t.csv", []byte("# last week\narrival,pods,gpus,duration,network\n2h,1,8,2h,rdma\n0s, 4, 8, 6h30m, vf\n\n90m,1,1,20m,none\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := []job{
		{Name: "job-000", Pods: 4, GPUs: 8, RDMA: true, VF: true, At: 0, Duration: h(6.5)},
		{Name: "job-001", Pods: 1, GPUs: 1, At: h(1.5), Duration: 20 * time.Minute},
		{Name: "job-002", Pods: 1, GPUs: 8, RDMA: true, At: h(2), Duration: h(2)},
	}
	if diff := cmp.Diff(want, got.jobs, cmp.AllowUnexported(job{})); diff != "" {
		t.Errorf("(-want,+got):\n%s", diff)
	}
	stamps, err := ParseTrace("t.csv", []byte("2026-11-24T10:00:00Z,1,2,1h,rdma\n2026-11-24T09:15:00Z,1,2,1h,none\n"))
	if err != nil {
		t.Fatal(err)
	}
	if a, b := stamps.jobs[0].At, stamps.jobs[1].At; a != 0 || b != 45*time.Minute {
		t.Errorf("times from the earliest: %s, %s; want 0, 45m", a, b)
	}
	for _, tc := range []struct{ in, want string }{
		{"", "t.csv: no jobs"},
		{"# only a comment\n", "t.csv: no jobs"},
		{"arrival,gpus,pods,duration,network\n", "t.csv:1: header \"arrival,gpus,pods,duration,network\": want arrival,pods,gpus,duration,network"},
		{"0s,1,8,2h\n", "t.csv:1: 4 fields: want arrival,pods,gpus,duration,network"},
		{"0s,1,8,2h,rdma\nsoon,1,8,2h,rdma\n", "t.csv:2: arrival: \"soon\" is neither a duration"},
		{"-1h,1,8,2h,rdma\n", "t.csv:1: arrival: -1h: want 0 to 8784h0m0s from the start"},
		{"0s,1,8,2h,rdma\n2026-11-24T09:15:00Z,1,8,2h,rdma\n", "t.csv:2: arrival: \"2026-11-24T09:15:00Z\": the trace mixes durations and times"},
		{"2020-01-01T00:00:00Z,1,8,2h,rdma\n2026-01-01T00:00:00Z,1,8,2h,rdma\n", "t.csv:2: arrival: 52608h0m0s after the first job"},
		{"0s,0,8,2h,rdma\n", "t.csv:1: pods: \"0\": want 1 to 64"},
		{"0s,65,8,2h,rdma\n", "t.csv:1: pods: \"65\": want 1 to 64"},
		{"0s,1,9,2h,rdma\n", "t.csv:1: gpus: \"9\": want 1 to 8 GPUs a pod"},
		{"0s,1,x,2h,rdma\n", "t.csv:1: gpus: \"x\""},
		{"0s,1,8,0s,rdma\n", "t.csv:1: duration: \"0s\": want a duration in (0, 168h0m0s]"},
		{"0s,1,8,200h,rdma\n", "t.csv:1: duration: \"200h\""},
		{"0s,1,8,2h,infiniband\n", "t.csv:1: network: \"infiniband\": want none, rdma or vf"},
		{"0s,1,8,2h,rdma\n" + strings.Repeat("x", 2000) + "\n", "t.csv:2: bufio.Scanner: token too long (a line may have at most 1024 bytes)"},
		{strings.Repeat("0s,1,1,1h,none\n", maxJobs+1), "t.csv:100001: more than 100000 jobs"},
	} {
		if _, err := ParseTrace("t.csv", []byte(tc.in)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseTrace(%.40q) = %v, want %q", tc.in, err, tc.want)
		}
	}
	if _, err := ParseTrace("t.csv", make([]byte, maxTraceBytes+1)); err == nil || !strings.Contains(err.Error(), "at most 16777216") {
		t.Errorf("oversized trace: %v", err)
	}
	// A trace the cluster cannot run fails at Prepare, naming the job.
	one := ClusterSpec{Pools: []Pool{{Name: "h", Count: 1, Machine: "half-nic-8gpu-2nic"}}}
	for in, want := range map[string]string{
		"0s,1,8,1h,vf\n": "t.csv: job-000 takes SR-IOV VFs, but no node of the cluster has them",
	} {
		tr, err := ParseTrace("t.csv", []byte(in))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Prepare(one, DefaultWorkload.WithTrace(tr)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Prepare(%q) = %v, want %q", in, err, want)
		}
	}
}

// FuzzParseTrace: any input is refused or accepted quickly, without a
// panic, and what is accepted respects the caps.
func FuzzParseTrace(f *testing.F) {
	for _, s := range []string{"0s,1,8,2h,rdma\n", "2026-11-24T09:15:00Z,64,8,168h,vf\n", "arrival,pods,gpus,duration,network\n", "9999999h,1,1,1h,none\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		start := time.Now()
		tr, err := ParseTrace("t.csv", b)
		if took := time.Since(start); took > time.Second {
			t.Fatalf("%s to parse %q", took, b)
		}
		if err != nil {
			return
		}
		for i, j := range tr.jobs {
			if j.Pods < 1 || j.Pods > maxJobPods || j.GPUs < 1 || j.GPUs > 8 || j.Duration <= 0 || j.Duration > maxDuration || j.At < 0 || j.At > maxArrival {
				t.Fatalf("accepted past the caps: %+v", j)
			}
			if i > 0 && j.At < tr.jobs[i-1].At {
				t.Fatalf("jobs out of arrival order: %+v", tr.jobs)
			}
		}
	})
}

// TestRunTrace replays a three-job trace: the 8-GPU job that arrives
// second waits for the first to end, on the virtual clock.
func TestRunTrace(t *testing.T) {
	tr, err := ParseTrace("t.csv", []byte("0s,1,8,2h,rdma\n30m,1,8,1h,rdma\n45m,2,2,1h,none\n"))
	if err != nil {
		t.Fatal(err)
	}
	c := ClusterSpec{Pools: []Pool{{Name: "hgx", Count: 1, Machine: "hgx-h100-8gpu-8nic"}, {Name: "half", Count: 1, Machine: "half-nic-8gpu-2nic"}}}
	p, err := Prepare(c, DefaultWorkload.WithTrace(tr))
	if err != nil {
		t.Fatal(err)
	}
	cols, err := ColumnsNamed([]string{"required+proxy"})
	if err != nil {
		t.Fatal(err)
	}
	r, err := Run(context.Background(), p, cols[0], RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if r.GPUDirectJobs > p.Bound().Jobs {
		t.Errorf("%d eligible jobs, above the bound %+v", r.GPUDirectJobs, p.Bound())
	}
	// The first runs 0-2 h on the HGX; the second waits there until 2 h
	// (the half-NIC node has no 8 aligned GPUs) and ends at 3 h; the third
	// runs 45m-1h45m. JCT: 2, 2.5, 1 h.
	if r.Finished != 3 || r.GPUDirectJobs != 2 || r.MakespanHours != 3 || r.JCTMeanHours != 1.83 {
		t.Errorf("finished %d, eligible %d, makespan %v h, mean JCT %v h; want 3, 2, 3, 1.83", r.Finished, r.GPUDirectJobs, r.MakespanHours, r.JCTMeanHours)
	}
}
