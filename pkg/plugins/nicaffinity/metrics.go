package nicaffinity

import (
	"strings"
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

// The plugin's metrics, in kube-scheduler's registry (served on its
// /metrics with the scheduler's own). docs/metrics.md lists them. Label
// values are fixed sets: no node or pod names.
var (
	placements = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "nicaffinity", Subsystem: "scheduler", Name: "placements_total",
		Help:           "Pods bound with a GPU-NIC plan, by the plan's worst GPU-NIC level (none: the pod needs no NIC) and the pod's policy.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"level", "policy"})
	rejections = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "nicaffinity", Subsystem: "scheduler", Name: "filter_rejections_total",
		Help:           "Nodes Filter rejected, by reason.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"reason"})
	topologyNodes = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace: "nicaffinity", Subsystem: "scheduler", Name: "topology_nodes",
		Help:           "Nodes whose NodeResourceTopology the scheduler holds, by state: usable, unreadable (it cannot be compiled), stale (no new version of it for longer than topologyMaxAge).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"state"})
	reservations = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace: "nicaffinity", Subsystem: "scheduler", Name: "reservations",
		Help:           "GPU reservations held for pods whose node's NodeResourceTopology does not count them yet.",
		StabilityLevel: metrics.ALPHA,
	})
	registerOnce sync.Once
)

// Rejection reasons (the reason label).
const (
	reasonMissing     = "topology_missing"
	reasonUnreadable  = "topology_unreadable"
	reasonStale       = "topology_stale"
	reasonLagging     = "topology_lagging"
	reasonNoAligned   = "no_aligned_gpu"
	reasonTooFew      = "too_few_aligned_gpus"
	reasonNoVF        = "no_free_vf"
	reasonNoGPUDirect = "gpudirect_impossible"
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

// reject counts one rejection.
func reject(reason string) { rejections.WithLabelValues(reason).Inc() }

// unusableReason maps why a node has no usable view to a reason label.
func unusableReason(why string) string {
	switch {
	case strings.Contains(why, "is stale"):
		return reasonStale
	case strings.Contains(why, "cannot be read"):
		return reasonUnreadable
	}
	return reasonMissing
}

// MetricNames are the full names of the plugin's metrics (docs and the
// dashboard are checked against them).
func MetricNames() []string {
	return []string{placements.FQName(), rejections.FQName(), topologyNodes.FQName(), reservations.FQName()}
}
