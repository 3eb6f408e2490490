// Package manifests embeds the deployment manifests, so the tests and the
// simulator install exactly what users apply (kubectl apply -k manifests/).
package manifests

import "embed"

// CRDs holds the CustomResourceDefinitions we install.
//
//go:embed crds/*.yaml
var CRDs embed.FS

// SchedulerConfigMap is the ConfigMap that holds the scheduler's
// KubeSchedulerConfiguration (key scheduler-config.yaml).
//
//go:embed scheduler-config.yaml
var SchedulerConfigMap []byte

// AdmissionPolicies are the ValidatingAdmissionPolicies and their bindings
// that limit each writer (docs/security.md).
//
//go:embed admission-policies.yaml
var AdmissionPolicies []byte

// ExporterRBAC is the exporter's ServiceAccount, ClusterRole and binding.
//
//go:embed rbac-exporter.yaml
var ExporterRBAC []byte
