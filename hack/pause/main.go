// Command pause is the pod sandbox's process for the test cluster
// (internal/realcluster): it holds the pod's namespaces until it is told
// to stop, as registry.k8s.io/pause does, which cannot be pulled here.
// With -env it first prints its environment, one variable a line, so a
// test reads from a container's log what the kubelet gave it (the device
// plugins' NVIDIA_VISIBLE_DEVICES and NCCL_IB_HCA). Not shipped.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"slices"
	"syscall"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-env" {
		for _, kv := range slices.Sorted(slices.Values(os.Environ())) {
			fmt.Println(kv)
		}
	}
	// As pid 1 of a pod that shares its process namespace, reap orphans.
	signal.Ignore(syscall.SIGCHLD)
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGINT, syscall.SIGTERM)
	<-c
}
