// Package version is nicaffinity's release number. Releases are
// v0.<Kubernetes minor>.<patch>: v0.37.x is built against, and tested
// with, Kubernetes 1.37, so the number says which scheduler and API a
// release belongs to.
package version

import (
	"fmt"
	"runtime"
)

// KubernetesMinor is the Kubernetes minor release this tree builds against
// (k8s.io/kubernetes v1.37.x, staging modules v0.37.x).
const KubernetesMinor = 37

// Version is stamped at build time (make build: -ldflags -X
// github.com/nicaffinity/nicaffinity/pkg/version.Version=v0.37.1); a
// plain go build says it is a development build. It must stay a string
// literal: -X cannot set a variable whose initializer runs code.
var Version = "v0.37.0-dev"

// String is what every binary's --version prints.
func String() string {
	return fmt.Sprintf("%s (Kubernetes 1.%d, %s %s/%s)", Version, KubernetesMinor, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
