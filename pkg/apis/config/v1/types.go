package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// NICAffinityArgs are the plugin's arguments in a KubeSchedulerConfiguration
// pluginConfig entry. Unset fields take the defaults of
// pkg/apis/config.
type NICAffinityArgs struct {
	metav1.TypeMeta `json:",inline"`

	// GPUResourceName is the GPU device-plugin resource. Default nvidia.com/gpu.
	GPUResourceName *string `json:"gpuResourceName,omitempty"`
	// RDMAResourcePrefixes mark a pod as needing a NIC when it requests a
	// resource that starts with one of them. Default ["rdma/"].
	RDMAResourcePrefixes []string `json:"rdmaResourcePrefixes,omitempty"`
	// SRIOVResourceNames are SR-IOV VF resources: the pod needs free VFs on
	// NICs next to its GPUs. Default ["openshift.io/sriov_highnet"].
	SRIOVResourceNames []string `json:"sriovResourceNames,omitempty"`
	// DefaultMaxLevel applies when the pod has no nicaffinity.io/max-level
	// and sets no NCCL_NET_GDR_LEVEL. Default P2C: where NCCL's defaults use
	// GPUDirect RDMA (docs/levels.md).
	DefaultMaxLevel *string `json:"defaultMaxLevel,omitempty"`
	// DefaultPolicy applies when the pod has no nicaffinity.io/policy:
	// required (wait for aligned GPUs for ever), preferred (never wait) or
	// bounded (wait alignmentWait, then place as preferred). Default bounded.
	DefaultPolicy *string `json:"defaultPolicy,omitempty"`
	// AlignmentWait is how long a bounded pod waits for aligned GPUs, on
	// the scheduler's clock from the first time the plugin turned a node
	// down for it; a pod's nicaffinity.io/alignment-wait overrides it.
	// 1s to 24h; default 30m.
	AlignmentWait *metav1.Duration `json:"alignmentWait,omitempty"`
	// MissingTopology says what a node without a usable NodeResourceTopology
	// (none, or one that cannot be read) means for pods with a required
	// level: Reject (default) or Ignore (the node passes and scores lowest).
	MissingTopology *string `json:"missingTopology,omitempty"`
	// StaleTopology says what to do while a node's object does not yet count
	// the pods this scheduler placed there (its pod fingerprint differs):
	// Reserve (default: subtract what was reserved) or Reject (wait for the object).
	StaleTopology *string `json:"staleTopology,omitempty"`
	// ReservationTimeout drops a reservation the object never confirmed, and
	// counts an ended pod's released GPUs in use again when no new object
	// came (docs/scheduler.md). Default 2m.
	ReservationTimeout *metav1.Duration `json:"reservationTimeout,omitempty"`
	// TopologyMaxAge is how long the scheduler may go without receiving a
	// new version of a node's object before the node counts as topology
	// unknown (its exporter stopped keeping it current), by the
	// scheduler's own clock. Default 5m, five of the exporter's default
	// resync periods; 0 turns the check off.
	TopologyMaxAge *metav1.Duration `json:"topologyMaxAge,omitempty"`
	// AnnotateAt is where the plan is written on the pod: Bind (default:
	// inside the Binding, no extra API call; the profile must run
	// NICAffinity's Bind before DefaultBinder) or PreBind (a separate patch).
	AnnotateAt *string `json:"annotateAt,omitempty"`
	// ScoringStrategy weighs the level, the certainty that the device plugin
	// hands out aligned GPUs, and packing.
	ScoringStrategy ScoringStrategy `json:"scoringStrategy,omitempty"`
	// JobLabels name a pod's job, in order, when it names no PodGroup
	// (spec.schedulingGroup.podGroupName). Default: JobSet, Kubeflow
	// training, indexed Job, Volcano and coscheduling labels
	// (request.DefaultJobLabels). Jobs are keyed by namespace.
	JobLabels []string `json:"jobLabels,omitempty"`
}

// ScoringStrategy picks how nodes are scored.
type ScoringStrategy struct {
	// Type is Balanced (default: weighted sum) or MostAligned (level first,
	// then certainty; packing only breaks ties).
	Type *string `json:"type,omitempty"`
	// The weights of Balanced, 0 to 100 each; all unset or 0: 3, 2, 1.
	LevelWeight     *int64 `json:"levelWeight,omitempty"`
	CertaintyWeight *int64 `json:"certaintyWeight,omitempty"`
	PackingWeight   *int64 `json:"packingWeight,omitempty"`
}
