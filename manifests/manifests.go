// Package manifests embeds the deployment manifests, so the tests and the
// simulator install exactly what users apply (kubectl apply -k manifests/).
package manifests

import "embed"

// CRDs holds the CustomResourceDefinitions we install.
//
//go:embed crds/*.yaml
var CRDs embed.FS
