// Command podresources-standin serves a kubelet podresources socket that
// offers this host's GPUs as the NVIDIA device plugin does (by UUID, else bus
// ID) and no pods, so that topology-exporter --no-publish can run on a GPU
// machine without a kubelet (the real-hardware checks in docs/real-gpu).
// Not shipped; a development aid.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/nicaffinity/nicaffinity/internal/kubeletsim"
	"github.com/nicaffinity/nicaffinity/internal/podresourcessim"
	"github.com/nicaffinity/nicaffinity/pkg/devices"
	"github.com/nicaffinity/nicaffinity/pkg/topology/discovery"
)

func main() {
	socket := flag.String("socket", "/tmp/podresources.sock", "where to serve")
	sysfs := flag.String("sysfs-root", "/sys", "sysfs to discover GPUs from")
	nvml := flag.String("nvml", "auto", "auto, on or off")
	flag.Parse()
	topo, err := discovery.Host{SysfsRoot: *sysfs, NVMLMode: *nvml}.Discover()
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
	var devs []devices.Device
	for i := range topo.GPUs {
		devs = append(devs, devices.Device{Resource: "nvidia.com/gpu", ID: kubeletsim.GPUID(topo, i)})
	}
	srv := podresourcessim.New(*socket)
	srv.SetAllocatable(devs)
	if err := srv.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "serving %d GPUs on %s\n", len(devs), *socket)
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, os.Interrupt, syscall.SIGTERM)
	<-stop
	srv.Stop()
}
