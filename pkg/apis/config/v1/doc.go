// Package v1 is the NICAffinity plugin's args as a profile's pluginConfig
// writes them (kubescheduler.config.k8s.io/v1, kind NICAffinityArgs):
// every field optional, defaulted from pkg/apis/config.
//
// +k8s:deepcopy-gen=package
// +k8s:conversion-gen=github.com/nicaffinity/nicaffinity/pkg/apis/config
// +k8s:defaulter-gen=TypeMeta
// +groupName=kubescheduler.config.k8s.io
package v1
