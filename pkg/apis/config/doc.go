// Package config is the NICAffinity plugin's configuration, the internal
// version the plugin reads, and the one home of nicaffinity's defaults:
// the scheduler's versioned args (v1) default to them, and the exporter,
// the allocation proxy, the CLI and the chart take theirs from here
// (test/manifests holds the chart and the manifests equal to them).
//
// +k8s:deepcopy-gen=package
package config
