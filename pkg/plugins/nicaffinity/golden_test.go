//go:build !race

package nicaffinity

import (
	"flag"
	"fmt"
	"strings"
	"testing"

	"github.com/k8stopologyawareschedwg/noderesourcetopology-api/pkg/apis/topology/v1alpha2"

	"github.com/nicaffinity/nicaffinity/internal/golden"
	"github.com/nicaffinity/nicaffinity/pkg/annotations"
	"github.com/nicaffinity/nicaffinity/pkg/kubectlplugin"
	"github.com/nicaffinity/nicaffinity/pkg/machines"
	"github.com/nicaffinity/nicaffinity/pkg/nrt"
	"github.com/nicaffinity/nicaffinity/pkg/placement"
	podreq "github.com/nicaffinity/nicaffinity/pkg/request"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata")

// TestDecisionsGolden is the gate for refactors that must change nothing
// users see: for fixed objects (every built-in machine shape, free and
// partly used, the half-NIC node, the hostile object) and a fixed table of
// pods, what PreFilter, Filter (code and every rejection text), Score and
// Reserve (the plan) decide, one line each, against
// testdata/decisions.golden. Run with -update only when a change is meant
// to change decisions, and say so in the commit.
func TestDecisionsGolden(t *testing.T) {
	objs, pods := goldenObjects(t), goldenPods()
	var out strings.Builder
	for _, o := range objs {
		for _, pc := range pods {
			pl, _ := newTestPlugin(t, goldenArgs, o)
			pod := makePod(pc.name, pc.gpus, pc.ann, pc.extra...)
			node := nodeInfo(o.Name, 16)
			cycle, st := preFilter(t, pl, pod, node, nodeInfo("bigger", 32))
			fmt.Fprintf(&out, "%s %s: prefilter=%s", o.Name, pc.name, statusText(st.Code().String(), st.Message()))
			// A Skip that keeps the pod's state skips Filter only: the
			// lines go on with what Filter would say (it must pass).
			if s, _ := getState(cycle); !st.IsSuccess() && (!st.IsSkip() || s == nil) {
				out.WriteString("\n")
				continue
			}
			f := pl.Filter(t.Context(), cycle, pod, node)
			score, _ := pl.Score(t.Context(), cycle, pod, node)
			fmt.Fprintf(&out, " filter=%s score=%d", statusText(f.Code().String(), f.Message()), score)
			if f.IsSuccess() {
				r := pl.Reserve(t.Context(), cycle, pod, o.Name)
				s, _ := getState(cycle)
				plan := "none"
				if s != nil && s.planned != nil {
					plan = annotations.Marshal(s.planned)
				}
				fmt.Fprintf(&out, " reserve=%s plan=%s", statusText(r.Code().String(), r.Message()), plan)
			}
			out.WriteString("\n")
		}
	}
	golden.Check(t, "testdata/decisions.golden", []byte(out.String()), *update)
}

// podCase is a pod of the golden table.
type podCase struct {
	name  string
	gpus  int64
	ann   map[string]string
	extra []string
}

// goldenObjects are the golden table's nodes: every built-in machine shape,
// free and partly used, the half-NIC node, the hostile object.
func goldenObjects(t testing.TB) []*v1alpha2.NodeResourceTopology {
	objs := []*v1alpha2.NodeResourceTopology{handNRT("half", 0, 1, 2, 3, 4, 5, 6, 7), handNRT("half-used", 2, 3, 6, 7), hostileNRT("hostile")}
	for _, m := range machines.Machines {
		objs = append(objs, machineNRT(t, m.Name, m.Build), machineNRT(t, m.Name+"-used", m.Build, 0, 3, 5))
	}
	return append(objs, machineNRT(t, "h20-sriov", machines.H20SRIOV, 1))
}

// goldenPods are the golden table's pods.
func goldenPods() []podCase {
	var pods []podCase
	for _, g := range []int64{1, 2, 3, 4, 7, 8} {
		pods = append(pods,
			podCase{fmt.Sprintf("plain-%d", g), g, nil, nil},
			podCase{fmt.Sprintf("rdma-%d", g), g, nil, []string{rdma, "1"}},
			podCase{fmt.Sprintf("rdma-%d-preferred", g), g, map[string]string{annotations.Policy: annotations.PolicyPreferred}, []string{rdma, "1"}},
			podCase{fmt.Sprintf("rdma-%d-PIX", g), g, map[string]string{annotations.MaxLevel: "PIX"}, []string{rdma, "1"}},
			podCase{fmt.Sprintf("rdma-%d-NODE", g), g, map[string]string{annotations.MaxLevel: "NODE", annotations.RDMA: "true"}, nil},
			podCase{fmt.Sprintf("vf-%d", g), g, nil, []string{sriov, fmt.Sprint(g)}},
		)
	}
	return append(pods, podCase{"bad-level", 2, map[string]string{annotations.MaxLevel: "CLOSE"}, []string{rdma, "1"}},
		podCase{"bad-policy", 2, map[string]string{annotations.Policy: "always"}, []string{rdma, "1"}})
}

// goldenArgs are the golden table's plugin args.
func goldenArgs(a *Args) { a.SRIOVResourceNames = []string{sriov, "openshift.io/sriov_net"} }

// TestWhyAsksWhatFilterDecides: kubectl nicaffinity why asks pkg/placement
// what Filter asks it. For every pod of the golden table that Filter judges
// (RDMA, required, no more GPUs than the node has) on every object that
// compiles, why's verdict fits exactly when Filter passes, and a refusal
// carries Filter's message word for word.
func TestWhyAsksWhatFilterDecides(t *testing.T) {
	compared := 0
	for _, o := range goldenObjects(t) {
		for _, pc := range goldenPods() {
			pl, _ := newTestPlugin(t, goldenArgs, o)
			pod := makePod(pc.name, pc.gpus, pc.ann, pc.extra...)
			node := nodeInfo(o.Name, 16)
			cycle, st := preFilter(t, pl, pod, node, nodeInfo("bigger", 32))
			s, _ := getState(cycle)
			comp, err := nrt.Compile(o, pl.args.GPUResourceName)
			// As TestDecisionsGolden: a Skip that keeps the pod's state
			// skips Filter only, which then passes or refuses alike.
			if (!st.IsSuccess() && !st.IsSkip()) || s == nil || !s.req.RDMA || !s.req.Required || err != nil || s.req.GPUs > len(comp.GPUs) {
				continue
			}
			f := pl.Filter(t.Context(), cycle, pod, node)
			r, _, err := podreq.Read(pod, RequestConfig(pl.args))
			if err != nil {
				t.Fatal(err)
			}
			req := placement.FromPod(r, RequestConfig(pl.args))
			v := kubectlplugin.NodeVerdict(comp, &req)
			if v.Fits != f.IsSuccess() || (!v.Fits && v.Message != f.Message()) {
				t.Errorf("%s %s: why says fits=%v %q; Filter says %v %q", o.Name, pc.name, v.Fits, v.Message, f.Code(), f.Message())
			}
			compared++
		}
	}
	if compared < 200 {
		t.Errorf("only %d decisions compared", compared)
	}
	t.Logf("%d decisions compared", compared)
}

func statusText(code, msg string) string {
	if msg == "" {
		return code
	}
	return fmt.Sprintf("%s(%q)", code, msg)
}
