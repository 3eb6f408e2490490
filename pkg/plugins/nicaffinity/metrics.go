package nicaffinity

import (
	"sync"

	"github.com/nicaffinity/nicaffinity/pkg/placement"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

// The plugin's metrics, in kube-scheduler's registry (served on its
// /metrics with the scheduler's own), registered once per process and
// labelled by the scheduler profile of the plugin instance that counts, so
// two NICAffinity profiles in one scheduler keep separate series.
// docs/metrics.md lists them. Label values are fixed sets and profile
// names: no node or pod names.
var (
	placements = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "nicaffinity", Subsystem: "scheduler", Name: "placements_total",
		Help:           "Pods bound with a GPU-NIC plan, by the plan's worst GPU-NIC level (none: the pod needs no NIC) and the pod's policy.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"profile", "level", "policy"})
	rejections = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "nicaffinity", Subsystem: "scheduler", Name: "filter_rejections_total",
		Help:           "Nodes Filter rejected, by reason.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"profile", "reason"})
	topologyNodes = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace: "nicaffinity", Subsystem: "scheduler", Name: "topology_nodes",
		Help:           "Nodes whose NodeResourceTopology the scheduler holds, by state: usable, unreadable (it cannot be compiled), stale (no new version of it for longer than topologyMaxAge).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"profile", "state"})
	reservations = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace: "nicaffinity", Subsystem: "scheduler", Name: "reservations",
		Help:           "GPU reservations held for pods whose node's NodeResourceTopology does not count them yet.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"profile"})
	registerOnce sync.Once
)

// Rejection reasons (the reason label).
const (
	reasonMissing     = "topology_missing"
	reasonUnreadable  = "topology_unreadable"
	reasonStale       = "topology_stale"
	reasonLagging     = "topology_lagging"
	reasonNoAligned   = placement.ReasonNoAligned
	reasonTooFew      = placement.ReasonTooFew
	reasonNoVF        = placement.ReasonNoVF
	reasonNoGPUDirect = placement.ReasonNoGPUDirect
	reasonRails       = placement.ReasonRails
)

// Topology states (the state label).
const (
	stateUsable     = "usable"
	stateUnreadable = "unreadable"
	stateStale      = "stale"
)

// registerMetrics registers the metrics once per process. component-base
// metrics do nothing until registered, so caches and plugins register
// before they count.
func registerMetrics() {
	registerOnce.Do(func() {
		legacyregistry.MustRegister(placements, rejections, topologyNodes, reservations)
	})
}

// profileMetrics counts for one plugin instance: its profile is the first
// label of every series it writes.
type profileMetrics struct {
	profile string
	// held is the profile's reservations series, looked up once: the
	// cache sets it on every view it publishes, Reserve's among them.
	held metrics.GaugeMetric
}

// newProfileMetrics registers the metrics and counts under profile.
func newProfileMetrics(profile string) profileMetrics {
	registerMetrics()
	return profileMetrics{profile: profile, held: reservations.WithLabelValues(profile)}
}

// reject counts one rejection.
func (m profileMetrics) reject(reason string) { rejections.WithLabelValues(m.profile, reason).Inc() }

// placed counts one pod bound with its plan.
func (m profileMetrics) placed(level, policy string) {
	placements.WithLabelValues(m.profile, level, policy).Inc()
}

// moveNode moves one node between topology_nodes states ("" is none).
func (m profileMetrics) moveNode(from, to string) {
	if from != "" {
		topologyNodes.WithLabelValues(m.profile, from).Dec()
	}
	if to != "" {
		topologyNodes.WithLabelValues(m.profile, to).Inc()
	}
}

// setReservations sets the reservations gauge.
func (m profileMetrics) setReservations(n int) { m.held.Set(float64(n)) }

// unusableReason is the reason label of a node without a usable view, from
// the view's state (the cache sets it; no text is parsed).
func unusableReason(v *nodeView) string {
	switch {
	case v == nil || v.state == "":
		return reasonMissing
	case v.state == stateStale:
		return reasonStale
	}
	return reasonUnreadable
}

// MetricNames are the full names of the plugin's metrics (docs and the
// dashboard are checked against them).
func MetricNames() []string {
	return []string{placements.FQName(), rejections.FQName(), topologyNodes.FQName(), reservations.FQName()}
}
