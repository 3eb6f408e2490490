package v1

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupName is kube-scheduler's configuration group.
const GroupName = "kubescheduler.config.k8s.io"

// SchemeGroupVersion is the version profiles write.
var SchemeGroupVersion = schema.GroupVersion{Group: GroupName, Version: "v1"}

var (
	// SchemeBuilder registers the v1 types, their defaults and conversions.
	SchemeBuilder      = runtime.NewSchemeBuilder(AddKnownTypes)
	localSchemeBuilder = &SchemeBuilder
	// AddToScheme adds them to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func init() {
	// The generated conversions and defaults register themselves too.
	localSchemeBuilder.Register(addDefaultingFuncs)
}

// AddKnownTypes registers NICAffinityArgs in v1.
func AddKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(SchemeGroupVersion, &NICAffinityArgs{})
	return nil
}
