package nicaffinity

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/nicaffinity/nicaffinity/pkg/annotations"
)

// TestSignPod: pods that ask alike sign alike, whatever order their
// resources come in; anything Filter or Score reads changes the signature;
// pods without GPUs sign with no fragment; bad annotations refuse to sign.
func TestSignPod(t *testing.T) {
	pl, _ := newTestPlugin(t, func(a *Args) { a.SRIOVResourceNames = []string{"vendor/vf_a", "vendor/vf_b"} })
	base, st := signOf(t, pl, makePod("a", 2, nil, rdma, "1"))
	if !st.IsSuccess() {
		t.Fatalf("SignPod = %v", st)
	}
	want := `[{"Key":"nicaffinity.io/request","Value":{"gpus":2,"rdma":true,"maxLevel":"P2C","required":true}}]`
	if diff := cmp.Diff(want, base); diff != "" {
		t.Errorf("signature (-want,+got):\n%s", diff)
	}
	if again, _ := signOf(t, pl, makePod("b", 2, nil, rdma, "1")); again != base {
		t.Errorf("same request, other pod: %s, want %s", again, base)
	}
	vfs, _ := signOf(t, pl, makePod("v", 2, nil, "vendor/vf_b", "1", "vendor/vf_a", "2"))
	for i := 0; i < 20; i++ { // map order must not show
		if again, _ := signOf(t, pl, makePod("v", 2, nil, "vendor/vf_a", "2", "vendor/vf_b", "1")); again != vfs {
			t.Fatalf("VF order changed the signature: %s vs %s", again, vfs)
		}
	}
	for _, tc := range []struct {
		name string
		sig  string
	}{
		{"more GPUs", must(signOf(t, pl, makePod("a", 3, nil, rdma, "1")))},
		{"no RDMA", must(signOf(t, pl, makePod("a", 2, nil)))},
		{"own level", must(signOf(t, pl, makePod("a", 2, map[string]string{annotations.MaxLevel: "PIX"}, rdma, "1")))},
		{"preferred", must(signOf(t, pl, makePod("a", 2, map[string]string{annotations.Policy: "preferred"}, rdma, "1")))},
		{"VFs", vfs},
		{"a job", must(signOf(t, pl, inJob(makePod("a", 2, map[string]string{annotations.Rails: "ignore"}, rdma, "1"), "train-1")))},
		{"NCCL's own cut-off", must(signOf(t, pl, withEnv(makePod("a", 2, nil, rdma, "1"), "NCCL_NET_GDR_LEVEL", "PHB")))},
	} {
		if tc.sig == base {
			t.Errorf("%s: signs like the base pod", tc.name)
		}
	}
	ignore := map[string]string{annotations.Rails: "ignore"}
	j1, _ := signOf(t, pl, inJob(makePod("a", 2, ignore, rdma, "1"), "train-1"))
	if j2, _ := signOf(t, pl, inJob(makePod("b", 2, ignore, rdma, "1"), "train-1")); j2 != j1 {
		t.Errorf("two pods of one job sign apart: %s vs %s", j1, j2)
	}
	if j3, _ := signOf(t, pl, inJob(makePod("c", 2, ignore, rdma, "1"), "train-2")); j3 == j1 {
		t.Errorf("pods of two jobs sign alike: %s", j3)
	}
	// A job's RDMA pod that follows its job's rails is placed by where the
	// job's other pods went: no ranking can be reused for it.
	for _, rails := range []map[string]string{nil, {annotations.Rails: "required"}} {
		if _, st := signOf(t, pl, inJob(makePod("r", 2, rails, rdma, "1"), "train-1")); st.Code() != fwk.Unschedulable {
			t.Errorf("a job's pod on its rails (%v): %v, want Unschedulable (not signable)", rails, st)
		}
	}
	if _, st := signOf(t, pl, inJob(makePod("n", 2, nil), "train-1")); !st.IsSuccess() {
		t.Errorf("a job's pod without RDMA: %v, want signed (rails mean nothing to it)", st)
	}
	if sig, st := signOf(t, pl, makePod("cpu", 0, nil)); !st.IsSuccess() || sig != "null" {
		t.Errorf("pod without GPUs: %s %v, want no fragment", sig, st)
	}
	if _, st := signOf(t, pl, makePod("bad", 1, map[string]string{annotations.MaxLevel: "CLOSE"})); st.Code() != fwk.Unschedulable {
		t.Errorf("bad annotation: %v, want Unschedulable (not signable)", st)
	}
}

func signOf(t *testing.T, pl *NICAffinity, pod *v1.Pod) (string, *fwk.Status) {
	t.Helper()
	frags, st := pl.SignPod(t.Context(), pod)
	if !st.IsSuccess() {
		return "", st
	}
	b, err := json.Marshal(frags)
	if err != nil {
		t.Fatal(err)
	}
	return string(b), st
}

func must(s string, _ *fwk.Status) string { return s }

// inJob puts the pod in an indexed Job of its namespace.
func inJob(p *v1.Pod, job string) *v1.Pod {
	p.Labels = map[string]string{"batch.kubernetes.io/job-name": job}
	return p
}
