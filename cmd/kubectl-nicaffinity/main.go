// Command kubectl-nicaffinity is the kubectl plugin: copy it onto PATH and
// run `kubectl nicaffinity topo NODE` or `kubectl nicaffinity why POD`.
package main

import (
	"fmt"
	"os"

	"github.com/nicaffinity/nicaffinity/pkg/kubectlplugin"
)

func main() {
	if err := kubectlplugin.NewCommand(&kubectlplugin.Options{}).Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}
