package config

import (
	"time"

	"github.com/nicaffinity/nicaffinity/pkg/annotations"
	"github.com/nicaffinity/nicaffinity/pkg/topology"
)

// The defaults of nicaffinity's configuration. Every component that has a
// setting of the same meaning takes its default from here: the scheduler's
// args (v1.SetDefaults_NICAffinityArgs), the exporter's and the proxy's
// flags, the CLI's flags. The chart's values.yaml and manifests/ cannot
// import Go; a test holds them equal (test/manifests).
const (
	// DefaultGPUResourceName is the NVIDIA device plugin's resource.
	DefaultGPUResourceName = "nvidia.com/gpu"
	// DefaultMaxLevel is where NCCL's defaults use GPUDirect RDMA: PXB,
	// and P2C on Grace (docs/levels.md).
	DefaultMaxLevel = "P2C"
	// DefaultPolicy: a pod that cannot get aligned GPUs waits for them,
	// for DefaultAlignmentWait, then takes others (docs/scheduler.md,
	// Bounded wait, says why).
	DefaultPolicy = annotations.PolicyBounded

	DefaultMissingTopology = MissingReject
	DefaultStaleTopology   = StaleReserve
	DefaultAnnotateAt      = AnnotateAtBind
	DefaultScoringType     = StrategyBalanced

	DefaultLevelWeight     int64 = 3
	DefaultCertaintyWeight int64 = 2
	DefaultPackingWeight   int64 = 1

	// DefaultAlignmentWait is how long a bounded pod waits for aligned
	// GPUs (docs/scheduler.md, Bounded wait).
	DefaultAlignmentWait = 30 * time.Minute

	DefaultReservationTimeout = 2 * time.Minute
	// DefaultTopologyMaxAge is five of the exporter's default resync
	// periods.
	DefaultTopologyMaxAge = 5 * time.Minute
)

// DefaultRDMAResourcePrefixes mark RDMA resources: the RDMA shared device
// plugin's and the SR-IOV network device plugin's rdma/ names.
func DefaultRDMAResourcePrefixes() []string { return []string{"rdma/"} }

// DefaultSRIOVResourceNames are the SR-IOV network operator's example
// resource.
func DefaultSRIOVResourceNames() []string { return []string{"openshift.io/sriov_highnet"} }

// Values of the enumerated fields.
const (
	MissingReject = "Reject"
	MissingIgnore = "Ignore"
	StaleReserve  = "Reserve"
	StaleReject   = "Reject"

	AnnotateAtBind    = "Bind"
	AnnotateAtPreBind = "PreBind"

	StrategyBalanced    = "Balanced"
	StrategyMostAligned = "MostAligned"
)

// DefaultLevel is DefaultMaxLevel as a level.
func DefaultLevel() topology.Level {
	l, _ := annotations.ParseMaxLevel(DefaultMaxLevel)
	return l
}
