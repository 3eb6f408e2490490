// Package podgroupapi answers one question the scheduler, doctor and the
// docs share: does the apiserver serve the PodGroup API
// (scheduling.k8s.io/v1beta1 podgroups) that kube-scheduler's
// GenericWorkload gate needs?
//
// A standard Kubernetes 1.37 apiserver does not: the API is beta and off
// by default. A scheduler started with GenericWorkload on against such an
// apiserver waits for ever on an informer that never syncs and places no
// pod. So the scheduler asks first and runs without gangs when the answer
// is no (Gate), and `nicaffinity doctor cluster` reports it with the fix.
package podgroupapi

import (
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/discovery"
)

// GroupVersion and Resource name the API.
const (
	GroupVersion = "scheduling.k8s.io/v1beta1"
	Resource     = "podgroups"
)

// Fix is what an admin does to serve it.
const Fix = "start kube-apiserver with --feature-gates=GenericWorkload=true --runtime-config=scheduling.k8s.io/v1beta1=true"

// Gate is kube-scheduler's feature gate that needs the API, and
// Dependents the gates that need it in turn (k8s.io/kubernetes
// pkg/features, 1.37): turning the one off turns them off too.
const Gate = "GenericWorkload"

var Dependents = []string{"CompositePodGroup", "DRAWorkloadResourceClaims", "PodGroupPreemptionPolicy", "TopologyAwareWorkloadScheduling", "WorkloadWithJob"}

// Served says whether the apiserver serves podgroups in GroupVersion. An
// error means it could not tell (the apiserver did not answer).
func Served(d discovery.DiscoveryInterface) (bool, error) {
	l, err := d.ServerResourcesForGroupVersion(GroupVersion)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("asking the apiserver for %s: %w", GroupVersion, err)
	}
	for _, r := range l.APIResources {
		if r.Name == Resource {
			return true, nil
		}
	}
	return false, nil
}

// ErrNotServed explains running without gangs.
var ErrNotServed = errors.New("the apiserver does not serve " + GroupVersion + " " + Resource + ": the " + Gate +
	" feature gate is off in this scheduler, so PodGroup gangs are not placed whole (each pod is placed on its own); to place gangs, " + Fix)
