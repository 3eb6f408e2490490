package nicaffinity

import (
	"fmt"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"

	"github.com/nicaffinity/nicaffinity/pkg/annotations"
	podreq "github.com/nicaffinity/nicaffinity/pkg/request"
	"github.com/nicaffinity/nicaffinity/pkg/topology"
)

// Args are the plugin's arguments in a KubeSchedulerConfiguration
// (kubescheduler.config.k8s.io/v1) pluginConfig entry.
type Args struct {
	metav1.TypeMeta `json:",inline"`
	// GPUResourceName is the GPU device-plugin resource. Default nvidia.com/gpu.
	GPUResourceName string `json:"gpuResourceName,omitempty"`
	// RDMAResourcePrefixes mark a pod as needing a NIC when it requests a
	// resource that starts with one of them. Default ["rdma/"].
	RDMAResourcePrefixes []string `json:"rdmaResourcePrefixes,omitempty"`
	// SRIOVResourceNames are SR-IOV VF resources: the pod needs free VFs on
	// NICs next to its GPUs. Default ["openshift.io/sriov_highnet"].
	SRIOVResourceNames []string `json:"sriovResourceNames,omitempty"`
	// DefaultMaxLevel applies when the pod has no nicaffinity.io/max-level
	// and sets no NCCL_NET_GDR_LEVEL. Default P2C: where NCCL's defaults use
	// GPUDirect RDMA (docs/levels.md).
	DefaultMaxLevel string `json:"defaultMaxLevel,omitempty"`
	// DefaultPolicy applies when the pod has no nicaffinity.io/policy: required or preferred. Default required.
	DefaultPolicy string `json:"defaultPolicy,omitempty"`
	// MissingTopology says what a node without a usable NodeResourceTopology
	// (none, or one that cannot be read) means for pods with a required
	// level: Reject (default) or Ignore (the node passes and scores lowest).
	MissingTopology string `json:"missingTopology,omitempty"`
	// StaleTopology says what to do while a node's object does not yet count
	// the pods this scheduler placed there (its pod fingerprint differs):
	// Reserve (default: subtract what was reserved) or Reject (wait for the object).
	StaleTopology string `json:"staleTopology,omitempty"`
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
	AnnotateAt string `json:"annotateAt,omitempty"`
	// ScoringStrategy weighs the level, the certainty that the device plugin
	// hands out aligned GPUs, and packing.
	ScoringStrategy ScoringStrategy `json:"scoringStrategy,omitempty"`
	// JobLabels name a pod's job, in order, when it names no PodGroup
	// (spec.schedulingGroup.podGroupName). Default: JobSet, Kubeflow
	// training, indexed Job, Volcano and coscheduling labels
	// (request.DefaultJobLabels). Jobs are keyed by namespace.
	JobLabels []string `json:"jobLabels,omitempty"`
}

// maxJobLabels bounds jobLabels: each is looked up for every pod.
const maxJobLabels = 16

// ScoringStrategy picks how nodes are scored.
type ScoringStrategy struct {
	// Type is Balanced (default: weighted sum) or MostAligned (level first,
	// then certainty; packing only breaks ties).
	Type            string `json:"type,omitempty"`
	LevelWeight     int64  `json:"levelWeight,omitempty"`
	CertaintyWeight int64  `json:"certaintyWeight,omitempty"`
	PackingWeight   int64  `json:"packingWeight,omitempty"`
}

// Policy values of MissingTopology and StaleTopology.
const (
	MissingReject = "Reject"
	MissingIgnore = "Ignore"
	StaleReserve  = "Reserve"
	StaleReject   = "Reject"

	AnnotateAtBind    = "Bind"
	AnnotateAtPreBind = "PreBind"
)

// SetDefaults fills what is unset.
func (a *Args) SetDefaults() {
	if a.GPUResourceName == "" {
		a.GPUResourceName = "nvidia.com/gpu"
	}
	if a.RDMAResourcePrefixes == nil {
		a.RDMAResourcePrefixes = []string{"rdma/"}
	}
	if a.SRIOVResourceNames == nil {
		a.SRIOVResourceNames = []string{"openshift.io/sriov_highnet"}
	}
	if a.DefaultMaxLevel == "" {
		a.DefaultMaxLevel = "P2C"
	}
	if a.DefaultPolicy == "" {
		a.DefaultPolicy = annotations.PolicyRequired
	}
	if a.MissingTopology == "" {
		a.MissingTopology = MissingReject
	}
	if a.StaleTopology == "" {
		a.StaleTopology = StaleReserve
	}
	if a.ReservationTimeout == nil {
		a.ReservationTimeout = &metav1.Duration{Duration: 2 * time.Minute}
	}
	if a.TopologyMaxAge == nil {
		a.TopologyMaxAge = &metav1.Duration{Duration: 5 * time.Minute}
	}
	if a.AnnotateAt == "" {
		a.AnnotateAt = AnnotateAtBind
	}
	if a.ScoringStrategy.Type == "" {
		a.ScoringStrategy.Type = StrategyBalanced
	}
	if a.JobLabels == nil {
		a.JobLabels = slices.Clone(podreq.DefaultJobLabels)
	}
	if a.ScoringStrategy.LevelWeight == 0 && a.ScoringStrategy.CertaintyWeight == 0 && a.ScoringStrategy.PackingWeight == 0 {
		a.ScoringStrategy.LevelWeight, a.ScoringStrategy.CertaintyWeight, a.ScoringStrategy.PackingWeight = 3, 2, 1
	}
}

// Validate checks defaulted args; every error names its field.
func (a *Args) Validate() field.ErrorList {
	var errs field.ErrorList
	root := field.NewPath("args")
	if strings.TrimSpace(a.GPUResourceName) == "" {
		errs = append(errs, field.Required(root.Child("gpuResourceName"), "the GPU resource name"))
	}
	if len(a.JobLabels) > maxJobLabels {
		errs = append(errs, field.TooMany(root.Child("jobLabels"), len(a.JobLabels), maxJobLabels))
	}
	for i, l := range a.JobLabels {
		for _, msg := range validation.IsQualifiedName(l) {
			errs = append(errs, field.Invalid(root.Child("jobLabels").Index(i), l, msg))
		}
	}
	for i, p := range a.RDMAResourcePrefixes {
		if strings.TrimSpace(p) == "" {
			errs = append(errs, field.Invalid(root.Child("rdmaResourcePrefixes").Index(i), p, "must not be empty"))
		}
	}
	for i, n := range a.SRIOVResourceNames {
		if !strings.Contains(n, "/") {
			errs = append(errs, field.Invalid(root.Child("sriovResourceNames").Index(i), n, "must be a full resource name such as openshift.io/sriov_highnet"))
		}
	}
	if _, err := annotations.ParseMaxLevel(a.DefaultMaxLevel); err != nil {
		errs = append(errs, field.NotSupported(root.Child("defaultMaxLevel"), a.DefaultMaxLevel, []string{"PIX", "PXB", "P2C", "PHB", "NODE", "SYS"}))
	}
	if _, err := annotations.ParsePolicy(a.DefaultPolicy); err != nil {
		errs = append(errs, field.NotSupported(root.Child("defaultPolicy"), a.DefaultPolicy, []string{annotations.PolicyRequired, annotations.PolicyPreferred}))
	}
	if a.MissingTopology != MissingReject && a.MissingTopology != MissingIgnore {
		errs = append(errs, field.NotSupported(root.Child("missingTopology"), a.MissingTopology, []string{MissingReject, MissingIgnore}))
	}
	if a.StaleTopology != StaleReserve && a.StaleTopology != StaleReject {
		errs = append(errs, field.NotSupported(root.Child("staleTopology"), a.StaleTopology, []string{StaleReserve, StaleReject}))
	}
	if a.ReservationTimeout != nil && a.ReservationTimeout.Duration <= 0 {
		errs = append(errs, field.Invalid(root.Child("reservationTimeout"), a.ReservationTimeout.Duration.String(), "must be positive"))
	}
	if a.TopologyMaxAge != nil && a.TopologyMaxAge.Duration < 0 {
		errs = append(errs, field.Invalid(root.Child("topologyMaxAge"), a.TopologyMaxAge.Duration.String(), "must be 0 (off) or positive"))
	}
	if a.AnnotateAt != AnnotateAtBind && a.AnnotateAt != AnnotateAtPreBind {
		errs = append(errs, field.NotSupported(root.Child("annotateAt"), a.AnnotateAt, []string{AnnotateAtBind, AnnotateAtPreBind}))
	}
	s := root.Child("scoringStrategy")
	if _, ok := strategies[a.ScoringStrategy.Type]; !ok {
		errs = append(errs, field.NotSupported(s.Child("type"), a.ScoringStrategy.Type, strategyNames()))
	}
	for name, w := range map[string]int64{"levelWeight": a.ScoringStrategy.LevelWeight, "certaintyWeight": a.ScoringStrategy.CertaintyWeight, "packingWeight": a.ScoringStrategy.PackingWeight} {
		if w < 0 || w > 100 {
			errs = append(errs, field.Invalid(s.Child(name), w, "must be between 0 and 100"))
		}
	}
	return errs
}

// decodeArgs reads the args the framework hands over, defaults and
// validates them. An out-of-tree plugin's args arrive as runtime.Unknown
// holding the profile's JSON (kube-scheduler converts its YAML); they are
// decoded strictly, so a misspelt field is an error, not a silent default.
// (The framework's own DecodeInto does the same without the strictness;
// using it would make this package depend on the scheduler runtime.)
func decodeArgs(obj runtime.Object) (*Args, error) {
	args := &Args{}
	switch raw := obj.(type) {
	case nil:
	case *runtime.Unknown:
		var err error
		switch raw.ContentType {
		case "", runtime.ContentTypeJSON, runtime.ContentTypeYAML:
			// YAML is a superset of JSON: one strict decoder reads both.
			err = yaml.UnmarshalStrict(raw.Raw, args)
		default:
			err = fmt.Errorf("content type %q, want JSON or YAML", raw.ContentType)
		}
		if err != nil {
			return nil, fmt.Errorf("%s args: %w", Name, err)
		}
	default:
		return nil, fmt.Errorf("%s args: got %T, want the profile's pluginConfig args", Name, obj)
	}
	args.SetDefaults()
	if errs := args.Validate(); len(errs) > 0 {
		return nil, fmt.Errorf("%s args: %w", Name, errs.ToAggregate())
	}
	return args, nil
}

func (a *Args) maxLevel() topology.Level {
	l, _ := annotations.ParseMaxLevel(a.DefaultMaxLevel)
	return l
}

// ParseArgs decodes, defaults and validates args as the scheduler hands them
// over (tests check the shipped configuration with it).
func ParseArgs(obj runtime.Object) (*Args, error) { return decodeArgs(obj) }

// RequestConfig is how the plugin with these (defaulted, valid) args reads
// pods: kubectl and doctor read them the same way.
func (a *Args) RequestConfig() podreq.Config {
	return podreq.Config{GPUResource: a.GPUResourceName, RDMAPrefixes: a.RDMAResourcePrefixes, SRIOVResources: a.SRIOVResourceNames,
		MaxLevel: a.maxLevel(), Required: a.DefaultPolicy == annotations.PolicyRequired, JobLabels: a.JobLabels}
}

// storeConfig is what the plugin's cache is made with, from these
// (defaulted, valid) args: plain values, so the store knows neither the
// args nor the plugin.
func (a *Args) storeConfig(profile string) storeConfig {
	return storeConfig{timeout: a.ReservationTimeout.Duration, maxAge: a.TopologyMaxAge.Duration, gpuResource: a.GPUResourceName,
		profile: profile, scoring: newScoring(a), staleRejects: a.StaleTopology == StaleReject}
}
