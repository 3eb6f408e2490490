// Package validation checks the NICAffinity plugin's defaulted args; every
// error names its field.
package validation

import (
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/nicaffinity/nicaffinity/pkg/annotations"
	"github.com/nicaffinity/nicaffinity/pkg/apis/config"
)

// MaxJobLabels bounds jobLabels: each is looked up for every pod.
const MaxJobLabels = 16

// Strategies are the scoring strategies' names.
var Strategies = []string{config.StrategyBalanced, config.StrategyMostAligned}

// ValidateNICAffinityArgs checks defaulted args at path (the profile's
// pluginConfig entry).
func ValidateNICAffinityArgs(path *field.Path, a *config.NICAffinityArgs) error {
	var errs field.ErrorList
	if strings.TrimSpace(a.GPUResourceName) == "" {
		errs = append(errs, field.Required(path.Child("gpuResourceName"), "the GPU resource name"))
	}
	errs = append(errs, validateJobLabels(path.Child("jobLabels"), a.JobLabels)...)
	for i, p := range a.RDMAResourcePrefixes {
		if strings.TrimSpace(p) == "" {
			errs = append(errs, field.Invalid(path.Child("rdmaResourcePrefixes").Index(i), p, "must not be empty"))
		}
	}
	for i, n := range a.SRIOVResourceNames {
		if !strings.Contains(n, "/") {
			errs = append(errs, field.Invalid(path.Child("sriovResourceNames").Index(i), n, "must be a full resource name such as openshift.io/sriov_highnet"))
		}
	}
	if _, err := annotations.ParseMaxLevel(a.DefaultMaxLevel); err != nil {
		errs = append(errs, field.NotSupported(path.Child("defaultMaxLevel"), a.DefaultMaxLevel, []string{"PIX", "PXB", "P2C", "PHB", "NODE", "SYS"}))
	}
	if _, err := annotations.ParsePolicy(a.DefaultPolicy); err != nil {
		errs = append(errs, field.NotSupported(path.Child("defaultPolicy"), a.DefaultPolicy, []string{annotations.PolicyRequired, annotations.PolicyPreferred, annotations.PolicyBounded}))
	}
	if err := annotations.CheckAlignmentWait(a.AlignmentWait.Duration); err != nil {
		errs = append(errs, field.Invalid(path.Child("alignmentWait"), a.AlignmentWait.Duration.String(), err.Error()))
	}
	errs = append(errs, oneOf(path.Child("missingTopology"), a.MissingTopology, config.MissingReject, config.MissingIgnore)...)
	errs = append(errs, oneOf(path.Child("staleTopology"), a.StaleTopology, config.StaleReserve, config.StaleReject)...)
	errs = append(errs, oneOf(path.Child("annotateAt"), a.AnnotateAt, config.AnnotateAtBind, config.AnnotateAtPreBind)...)
	if a.ReservationTimeout.Duration <= 0 {
		errs = append(errs, field.Invalid(path.Child("reservationTimeout"), a.ReservationTimeout.Duration.String(), "must be positive"))
	}
	if a.TopologyMaxAge.Duration < 0 {
		errs = append(errs, field.Invalid(path.Child("topologyMaxAge"), a.TopologyMaxAge.Duration.String(), "must be 0 (off) or positive"))
	}
	s := path.Child("scoringStrategy")
	errs = append(errs, oneOf(s.Child("type"), a.ScoringStrategy.Type, Strategies...)...)
	for _, w := range []struct {
		name string
		v    int64
	}{{"levelWeight", a.ScoringStrategy.LevelWeight}, {"certaintyWeight", a.ScoringStrategy.CertaintyWeight}, {"packingWeight", a.ScoringStrategy.PackingWeight}} {
		if w.v < 0 || w.v > 100 {
			errs = append(errs, field.Invalid(s.Child(w.name), w.v, "must be between 0 and 100"))
		}
	}
	return errs.ToAggregate()
}

func validateJobLabels(path *field.Path, labels []string) field.ErrorList {
	var errs field.ErrorList
	if len(labels) > MaxJobLabels {
		errs = append(errs, field.TooMany(path, len(labels), MaxJobLabels))
	}
	for i, l := range labels {
		for _, msg := range validation.IsQualifiedName(l) {
			errs = append(errs, field.Invalid(path.Index(i), l, msg))
		}
	}
	return errs
}

func oneOf(path *field.Path, v string, allowed ...string) field.ErrorList {
	for _, a := range allowed {
		if v == a {
			return nil
		}
	}
	return field.ErrorList{field.NotSupported(path, v, allowed)}
}
