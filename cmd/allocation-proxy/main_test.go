package main

import (
	"strings"
	"testing"

	"github.com/nicaffinity/nicaffinity/pkg/apis/config"
)

func TestBadFlags(t *testing.T) {
	for args, want := range map[string]string{
		"--node-name=":      "--node-name",
		"--timeout=0s":      "--timeout, --call-timeout and --max-fronts must be positive",
		"--call-timeout=0s": "--call-timeout",
		"--max-fronts=0":    "--max-fronts",
		"--vendor-dir=/var/lib/kubelet/device-plugins/": "--vendor-dir must not be the kubelet's directory",
		"--sriov-resources=nvidia.com/gpu":              "names the GPU resource",
	} {
		o := &options{}
		if err := commandFor(o).ParseFlags([]string{"--node-name=n", args}); err != nil {
			t.Fatal(err)
		}
		if _, err := o.config(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error = %v, want %q", args, err, want)
		}
	}
	o := &options{}
	if err := commandFor(o).ParseFlags([]string{"--node-name=n"}); err != nil {
		t.Fatal(err)
	}
	if cfg, err := o.config(); err != nil || len(cfg.Kinds) != 2 {
		t.Errorf("defaults: %+v, %v", cfg, err)
	}
}

// TestFlagDefaults: the proxy's resource names default to pkg/apis/config's.
func TestFlagDefaults(t *testing.T) {
	f := newCommand().Flags()
	for flag, want := range map[string]string{
		"gpu-resource":    config.DefaultGPUResourceName,
		"sriov-resources": "[" + strings.Join(config.DefaultSRIOVResourceNames(), ",") + "]",
	} {
		if got := f.Lookup(flag).DefValue; got != want {
			t.Errorf("--%s defaults to %s; pkg/apis/config says %s", flag, got, want)
		}
	}
}
