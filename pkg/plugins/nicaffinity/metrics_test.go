//go:build !race

package nicaffinity

import (
	"errors"
	"testing"

	"k8s.io/component-base/metrics/testutil"

	"github.com/nicaffinity/nicaffinity/pkg/annotations"
	"github.com/nicaffinity/nicaffinity/pkg/nrt"
	"github.com/nicaffinity/nicaffinity/pkg/topology"
)

func counter(t *testing.T, reason string) float64 {
	t.Helper()
	v, err := testutil.GetCounterMetricValue(rejections.WithLabelValues(testProfile, reason))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func gauge(t *testing.T, state string) float64 {
	return profileGauge(t, testProfile, state)
}

func profileGauge(t *testing.T, profile, state string) float64 {
	t.Helper()
	v, err := testutil.GetGaugeMetricValue(topologyNodes.WithLabelValues(profile, state))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestFilterRejectionMetric: every kind of rejection counts under its
// reason, once per rejected node.
func TestFilterRejectionMetric(t *testing.T) {
	garbled := handNRT("garbled", 0, 1)
	garbled.Zones[6].Costs[0].Value = 77
	tests := []struct {
		name   string
		node   string
		args   func(*Args)
		pod    podSpec
		reason string
	}{
		{name: "no object", node: "nowhere", pod: podSpec{gpus: 1, extra: []string{rdma, "1"}}, reason: reasonMissing},
		{name: "garbled object", node: "garbled", pod: podSpec{gpus: 1, extra: []string{rdma, "1"}}, reason: reasonUnreadable},
		{name: "no aligned GPU free", node: "full", pod: podSpec{gpus: 2, extra: []string{rdma, "1"}}, reason: reasonNoAligned},
		{name: "too few aligned GPUs", node: "some", pod: podSpec{gpus: 2, extra: []string{rdma, "1"}}, reason: reasonTooFew},
		{name: "no free VF", node: "h20", pod: podSpec{gpus: 1, extra: []string{"openshift.io/sriov_highnet", "1"}}, reason: reasonNoVF},
		{name: "GPUDirect impossible", node: "acs", pod: podSpec{gpus: 1, extra: []string{rdma, "1"}}, reason: reasonNoGPUDirect},
		{name: "lagging object", node: "lagging", args: func(a *Args) { a.StaleTopology = StaleReject }, pod: podSpec{gpus: 1, extra: []string{rdma, "1"}}, reason: reasonLagging},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pl, st := newTestPlugin(t, tc.args, garbled, handNRT("full", 4, 5, 6, 7), handNRT("some", 3, 4, 5), handNRT("lagging", 0, 1, 2, 3),
				readyNRT(t, "acs", acsAboveGPU0(topology.ACSRedirectBits)), sriovNRT(t, 0, 0))
			st.Reserve("lagging", "holder", 1<<7, nil)
			before := counter(t, tc.reason)
			cycle, s := preFilter(t, pl, makePod("p", tc.pod.gpus, map[string]string{annotations.MaxLevel: "PXB"}, tc.pod.extra...), nodeInfo("big", 16))
			if !s.IsSuccess() {
				t.Fatalf("PreFilter: %v", s)
			}
			if got := pl.Filter(t.Context(), cycle, nil, nodeInfo(tc.node, 8)); got.IsSuccess() {
				t.Fatalf("Filter passed node %s", tc.node)
			}
			if after := counter(t, tc.reason); after != before+1 {
				t.Errorf("%s{reason=%q}: %v -> %v, want one more", "nicaffinity_scheduler_filter_rejections_total", tc.reason, before, after)
			}
		})
	}
}

// TestTopologyAndReservationMetrics: a node moves between the
// topology_nodes states as its object changes, and reservations count
// what is held.
func TestTopologyAndReservationMetrics(t *testing.T) {
	st := newCache(storeConfig{gpuResource: "nvidia.com/gpu", profile: testProfile})
	usable, unreadable := gauge(t, stateUsable), gauge(t, stateUnreadable)
	c, err := nrt.Compile(handNRT("m", 0, 1), "nvidia.com/gpu")
	if err != nil {
		t.Fatal(err)
	}
	st.set("m", "", c, nil, nil)
	if gauge(t, stateUsable) != usable+1 {
		t.Errorf("usable after an object: %v, want %v", gauge(t, stateUsable), usable+1)
	}
	st.set("m", "", nil, errors.New("garbled"), nil)
	if gauge(t, stateUsable) != usable || gauge(t, stateUnreadable) != unreadable+1 {
		t.Errorf("after a garbled object: usable %v unreadable %v", gauge(t, stateUsable), gauge(t, stateUnreadable))
	}
	st.remove("m")
	if gauge(t, stateUnreadable) != unreadable {
		t.Errorf("after removal: unreadable %v, want %v", gauge(t, stateUnreadable), unreadable)
	}
	st.set("m", "", c, nil, nil)
	st.Reserve("m", "a", 1, nil)
	st.Reserve("m", "b", 2, nil)
	if v, _ := testutil.GetGaugeMetricValue(reservations.WithLabelValues(testProfile)); v != 2 {
		t.Errorf("reservations = %v, want 2", v)
	}
	st.Unreserve("m", "a")
	if v, _ := testutil.GetGaugeMetricValue(reservations.WithLabelValues(testProfile)); v != 1 {
		t.Errorf("reservations = %v, want 1", v)
	}
	st.remove("m")
	if v, _ := testutil.GetGaugeMetricValue(reservations.WithLabelValues(testProfile)); v != 0 {
		t.Errorf("reservations after removal = %v, want 0", v)
	}
}

// TestMetricsPerProfile: two NICAffinity profiles in one scheduler keep
// separate series: each counts its own nodes, reservations and rejections
// under its profile's name.
func TestMetricsPerProfile(t *testing.T) {
	c, err := nrt.Compile(handNRT("m", 0, 1), "nvidia.com/gpu")
	if err != nil {
		t.Fatal(err)
	}
	a, b := newCache(storeConfig{gpuResource: "nvidia.com/gpu", profile: "profile-a"}), newCache(storeConfig{gpuResource: "nvidia.com/gpu", profile: "profile-b"})
	beforeA, beforeB := profileGauge(t, "profile-a", stateUsable), profileGauge(t, "profile-b", stateUsable)
	a.set("m", "", c, nil, nil)
	a.set("n", "", c, nil, nil)
	b.set("m", "", c, nil, nil)
	if ga, gb := profileGauge(t, "profile-a", stateUsable)-beforeA, profileGauge(t, "profile-b", stateUsable)-beforeB; ga != 2 || gb != 1 {
		t.Errorf("usable nodes: profile-a %v, profile-b %v; want 2 and 1", ga, gb)
	}
	a.Reserve("m", "p", 1, nil)
	ra, _ := testutil.GetGaugeMetricValue(reservations.WithLabelValues("profile-a"))
	rb, _ := testutil.GetGaugeMetricValue(reservations.WithLabelValues("profile-b"))
	if ra != 1 || rb != 0 {
		t.Errorf("reservations: profile-a %v, profile-b %v; want 1 and 0", ra, rb)
	}
	before, _ := testutil.GetCounterMetricValue(rejections.WithLabelValues("profile-b", reasonMissing))
	b.metrics.reject(reasonMissing)
	after, _ := testutil.GetCounterMetricValue(rejections.WithLabelValues("profile-b", reasonMissing))
	other, _ := testutil.GetCounterMetricValue(rejections.WithLabelValues("profile-a", reasonMissing))
	if after != before+1 || other != 0 {
		t.Errorf("rejections: profile-b %v -> %v, profile-a %v", before, after, other)
	}
}
