package v1

import (
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/nicaffinity/nicaffinity/pkg/apis/config"
	podreq "github.com/nicaffinity/nicaffinity/pkg/request"
)

func addDefaultingFuncs(scheme *runtime.Scheme) error {
	return RegisterDefaults(scheme)
}

// SetDefaults_NICAffinityArgs fills what is unset from config's defaults.
func SetDefaults_NICAffinityArgs(a *NICAffinityArgs) {
	if a.GPUResourceName == nil || *a.GPUResourceName == "" {
		a.GPUResourceName = ptr.To(config.DefaultGPUResourceName)
	}
	if a.RDMAResourcePrefixes == nil {
		a.RDMAResourcePrefixes = config.DefaultRDMAResourcePrefixes()
	}
	if a.SRIOVResourceNames == nil {
		a.SRIOVResourceNames = config.DefaultSRIOVResourceNames()
	}
	setString(&a.DefaultMaxLevel, config.DefaultMaxLevel)
	setString(&a.DefaultPolicy, config.DefaultPolicy)
	setString(&a.MissingTopology, config.DefaultMissingTopology)
	setString(&a.StaleTopology, config.DefaultStaleTopology)
	setString(&a.AnnotateAt, config.DefaultAnnotateAt)
	if a.AlignmentWait == nil {
		a.AlignmentWait = &metav1.Duration{Duration: config.DefaultAlignmentWait}
	}
	if a.ReservationTimeout == nil {
		a.ReservationTimeout = &metav1.Duration{Duration: config.DefaultReservationTimeout}
	}
	if a.TopologyMaxAge == nil {
		a.TopologyMaxAge = &metav1.Duration{Duration: config.DefaultTopologyMaxAge}
	}
	s := &a.ScoringStrategy
	setString(&s.Type, config.DefaultScoringType)
	// Weights unset or all 0 are the defaults; one weight set keeps the
	// others at 0.
	if ptr.Deref(s.LevelWeight, 0) == 0 && ptr.Deref(s.CertaintyWeight, 0) == 0 && ptr.Deref(s.PackingWeight, 0) == 0 {
		s.LevelWeight, s.CertaintyWeight, s.PackingWeight = ptr.To(config.DefaultLevelWeight), ptr.To(config.DefaultCertaintyWeight), ptr.To(config.DefaultPackingWeight)
	}
	for _, w := range []**int64{&s.LevelWeight, &s.CertaintyWeight, &s.PackingWeight} {
		if *w == nil {
			*w = ptr.To[int64](0)
		}
	}
	if a.JobLabels == nil {
		a.JobLabels = slices.Clone(podreq.DefaultJobLabels)
	}
}

// setString sets *p to def when unset or empty.
func setString(p **string, def string) {
	if *p == nil || **p == "" {
		*p = ptr.To(def)
	}
}
