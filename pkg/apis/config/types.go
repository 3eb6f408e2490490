package config

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// NICAffinityArgs are the plugin's arguments, defaulted (v1 fills every
// field) and, once validation passed, valid.
type NICAffinityArgs struct {
	metav1.TypeMeta

	// GPUResourceName is the GPU device-plugin resource.
	GPUResourceName string
	// RDMAResourcePrefixes mark a pod as needing a NIC when it requests a
	// resource that starts with one of them.
	RDMAResourcePrefixes []string
	// SRIOVResourceNames are SR-IOV VF resources: the pod needs free VFs on
	// NICs next to its GPUs.
	SRIOVResourceNames []string
	// DefaultMaxLevel applies when the pod has no nicaffinity.io/max-level
	// and sets no NCCL_NET_GDR_LEVEL.
	DefaultMaxLevel string
	// DefaultPolicy applies when the pod has no nicaffinity.io/policy.
	DefaultPolicy string
	// AlignmentWait is how long a bounded pod waits for aligned GPUs
	// before it is placed as a preferred one.
	AlignmentWait metav1.Duration
	// MissingTopology: what a node without a usable NodeResourceTopology
	// means for pods with a required level (Reject or Ignore).
	MissingTopology string
	// StaleTopology: what to do while a node's object does not yet count
	// the pods this scheduler placed there (Reserve or Reject).
	StaleTopology string
	// ReservationTimeout drops a reservation the object never confirmed.
	ReservationTimeout metav1.Duration
	// TopologyMaxAge: how long a node's object may go without a new version
	// before the node counts as topology unknown; 0 is off.
	TopologyMaxAge metav1.Duration
	// AnnotateAt is where the plan is written on the pod (Bind or PreBind).
	AnnotateAt string
	// ScoringStrategy weighs level, certainty and packing.
	ScoringStrategy ScoringStrategy
	// JobLabels name a pod's job, in order, when it names no PodGroup.
	JobLabels []string
}

// ScoringStrategy picks how nodes are scored.
type ScoringStrategy struct {
	// Type is Balanced (weighted sum) or MostAligned (level first, then
	// certainty; packing only breaks ties).
	Type            string
	LevelWeight     int64
	CertaintyWeight int64
	PackingWeight   int64
}
