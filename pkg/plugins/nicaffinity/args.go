package nicaffinity

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/nicaffinity/nicaffinity/pkg/annotations"
	"github.com/nicaffinity/nicaffinity/pkg/apis/config"
	"github.com/nicaffinity/nicaffinity/pkg/apis/config/scheme"
	"github.com/nicaffinity/nicaffinity/pkg/apis/config/validation"
	podreq "github.com/nicaffinity/nicaffinity/pkg/request"
	"github.com/nicaffinity/nicaffinity/pkg/topology"
)

// Args are the plugin's internal, defaulted args (apis/config): what New
// receives from kube-scheduler, which decodes a profile's
// kubescheduler.config.k8s.io/v1 NICAffinityArgs itself (apis/config/v1,
// registered by apis/config/scheme).
type Args = config.NICAffinityArgs

// ScoringStrategy picks how nodes are scored.
type ScoringStrategy = config.ScoringStrategy

// The enumerated args' values (apis/config).
const (
	MissingReject = config.MissingReject
	MissingIgnore = config.MissingIgnore
	StaleReserve  = config.StaleReserve
	StaleReject   = config.StaleReject

	AnnotateAtBind    = config.AnnotateAtBind
	AnnotateAtPreBind = config.AnnotateAtPreBind

	StrategyBalanced    = config.StrategyBalanced
	StrategyMostAligned = config.StrategyMostAligned
)

// DefaultArgs are the args of a profile that gives none.
func DefaultArgs() *Args { return scheme.Defaulted() }

// ParseArgs reads args as a harness or kube-scheduler hands them over (see
// scheme.DecodeArgs), defaulted, and validates them.
func ParseArgs(obj runtime.Object) (*Args, error) {
	args, err := scheme.DecodeArgs(obj)
	if err != nil {
		return nil, fmt.Errorf("%s args: %w", Name, err)
	}
	if err := validate(args); err != nil {
		return nil, err
	}
	return args, nil
}

// validate is validation.ValidateNICAffinityArgs, the error naming the plugin.
func validate(a *Args) error {
	if err := validation.ValidateNICAffinityArgs(field.NewPath("args"), a); err != nil {
		return fmt.Errorf("%s args: %w", Name, err)
	}
	return nil
}

func maxLevelOf(a *Args) topology.Level {
	l, _ := annotations.ParseMaxLevel(a.DefaultMaxLevel)
	return l
}

// RequestConfig is how the plugin with these (defaulted, valid) args reads
// pods: kubectl and doctor read them the same way.
func RequestConfig(a *Args) podreq.Config {
	return podreq.Config{GPUResource: a.GPUResourceName, RDMAPrefixes: a.RDMAResourcePrefixes, SRIOVResources: a.SRIOVResourceNames,
		MaxLevel: maxLevelOf(a), Required: a.DefaultPolicy != annotations.PolicyPreferred, Bounded: a.DefaultPolicy == annotations.PolicyBounded,
		AlignmentWait: a.AlignmentWait.Duration, JobLabels: a.JobLabels}
}

// storeConfigOf is what the plugin's cache is made with, from these
// (defaulted, valid) args: plain values, so the store knows neither the
// args nor the plugin.
func storeConfigOf(a *Args, profile string) storeConfig {
	return storeConfig{timeout: a.ReservationTimeout.Duration, maxAge: a.TopologyMaxAge.Duration, gpuResource: a.GPUResourceName,
		profile: profile, scoring: newScoring(a), staleRejects: a.StaleTopology == StaleReject}
}
