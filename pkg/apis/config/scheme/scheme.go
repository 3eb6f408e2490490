// Package scheme decodes the NICAffinity plugin's args: strictly (a
// misspelt field is an error, not a silent default), defaulted and
// converted to the internal version. AddToKubeScheduler registers them
// with kube-scheduler's own configuration scheme, so the scheduler binary
// decodes a profile's args itself and hands the plugin the internal type.
package scheme

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	kubeschedv1 "k8s.io/kube-scheduler/config/v1"
	kubeschedconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	kubeschedscheme "k8s.io/kubernetes/pkg/scheduler/apis/config/scheme"

	"github.com/nicaffinity/nicaffinity/pkg/apis/config"
	configv1 "github.com/nicaffinity/nicaffinity/pkg/apis/config/v1"
)

var (
	// Scheme holds the internal and v1 args.
	Scheme = runtime.NewScheme()
	codecs = serializer.NewCodecFactory(Scheme, serializer.EnableStrict)
)

func init() {
	AddToScheme(Scheme)
	utilruntime.Must(Scheme.SetVersionPriority(configv1.SchemeGroupVersion))
	addToKubeScheduler()
}

// addToKubeScheduler registers the args with kube-scheduler, as in-tree
// plugins' args are: its configuration scheme decodes a profile's
// NICAffinity args strictly into v1 and defaults them, and its plugin-args
// conversion scheme (built from the same scheme builders, on first use)
// converts them to the internal type New receives.
func addToKubeScheduler() {
	AddToScheme(kubeschedscheme.Scheme)
	kubeschedconfig.SchemeBuilder.Register(config.AddKnownTypes)
	kubeschedv1.SchemeBuilder.Register(configv1.AddToScheme)
}

// AddToScheme registers the internal and v1 args, v1's defaults and the
// conversions between them.
func AddToScheme(s *runtime.Scheme) {
	utilruntime.Must(config.AddToScheme(s))
	utilruntime.Must(configv1.AddToScheme(s))
}

// Defaulted is the internal args with every default applied: what a
// profile without args gets.
func Defaulted() *config.NICAffinityArgs {
	out, err := DecodeArgs(nil)
	utilruntime.Must(err)
	return out
}

// DecodeArgs reads a profile's args as a harness hands them over: nil (no
// pluginConfig entry), the internal type (kube-scheduler decoded them),
// the v1 type, or runtime.Unknown holding the profile's JSON or YAML.
// The result is defaulted and converted; it is not validated.
func DecodeArgs(obj runtime.Object) (*config.NICAffinityArgs, error) {
	var v1args *configv1.NICAffinityArgs
	switch a := obj.(type) {
	case *config.NICAffinityArgs:
		return a, nil
	case nil:
		v1args = &configv1.NICAffinityArgs{}
	case *configv1.NICAffinityArgs:
		v1args = a.DeepCopy()
	case *runtime.Unknown:
		switch a.ContentType {
		case "", runtime.ContentTypeJSON, runtime.ContentTypeYAML:
		default:
			return nil, fmt.Errorf("content type %q, want JSON or YAML", a.ContentType)
		}
		v1args = &configv1.NICAffinityArgs{}
		gvk := configv1.SchemeGroupVersion.WithKind("NICAffinityArgs")
		// The profile's args carry no apiVersion or kind: they are this
		// kind by the plugin's name.
		if _, _, err := codecs.UniversalDecoder(configv1.SchemeGroupVersion).Decode(a.Raw, &gvk, v1args); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("got %T, want the profile's pluginConfig args", obj)
	}
	Scheme.Default(v1args)
	out := &config.NICAffinityArgs{}
	if err := Scheme.Convert(v1args, out, nil); err != nil {
		return nil, err
	}
	return out, nil
}
