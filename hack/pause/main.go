// Command pause is the pod sandbox's process for the test cluster
// (internal/realcluster): it holds the pod's namespaces until it is told
// to stop, as registry.k8s.io/pause does, which cannot be pulled here.
// Not shipped.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	// As pid 1 of a pod that shares its process namespace, reap orphans.
	signal.Ignore(syscall.SIGCHLD)
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGINT, syscall.SIGTERM)
	<-c
}
