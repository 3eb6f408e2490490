package nrt

import (
	"fmt"

	"github.com/k8stopologyawareschedwg/noderesourcetopology-api/pkg/apis/topology/v1alpha2"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// Bounds on a quantity string before it is parsed. resource.ParseQuantity
// takes time that grows faster than linearly in the exponent
// ("1e10000000" costs seconds), so quantities from objects are checked as
// strings first: at most maxQuantityLen bytes, with an exponent of at most
// maxExponentDigits digits.
const (
	maxQuantityLen    = 64
	maxExponentDigits = 3
)

// CheckQuantity refuses a quantity string that could be slow to parse. It
// does not check the syntax beyond that: ParseQuantity does, cheaply, once
// the string is bounded.
func CheckQuantity(s string) error {
	if len(s) > maxQuantityLen {
		return fmt.Errorf("quantity of %d bytes: at most %d", len(s), maxQuantityLen)
	}
	for i := 0; i < len(s); i++ {
		if s[i] != 'e' && s[i] != 'E' {
			continue
		}
		digits := 0
		for j := i + 1; j < len(s); j++ {
			if s[j] >= '0' && s[j] <= '9' {
				digits++
			} else if s[j] != '+' && s[j] != '-' {
				break
			}
		}
		if digits > maxExponentDigits {
			return fmt.Errorf("quantity %q: exponent of %d digits, at most %d", s, digits, maxExponentDigits)
		}
	}
	return nil
}

// Decode turns an unstructured NodeResourceTopology (as a dynamic informer
// delivers it) into the typed object, checking its quantities as strings
// and its size before anything parses them.
func Decode(u *unstructured.Unstructured) (*v1alpha2.NodeResourceTopology, error) {
	zones, _, err := unstructured.NestedSlice(u.Object, "zones")
	if err != nil {
		return nil, fmt.Errorf("zones: %w", err)
	}
	if len(zones) > MaxZones {
		return nil, fmt.Errorf("%d zones: at most %d", len(zones), MaxZones)
	}
	for i, z := range zones {
		zm, ok := z.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("zone %d is not an object", i)
		}
		resources, _, err := unstructured.NestedSlice(zm, "resources")
		if err != nil {
			return nil, fmt.Errorf("zone %d: resources: %w", i, err)
		}
		if len(resources) > MaxResourcesPerZone {
			return nil, fmt.Errorf("zone %d: %d resources, at most %d", i, len(resources), MaxResourcesPerZone)
		}
		for j, r := range resources {
			rm, ok := r.(map[string]any)
			if !ok {
				return nil, fmt.Errorf("zone %d: resource %d is not an object", i, j)
			}
			for _, field := range []string{"capacity", "allocatable", "available"} {
				switch q := rm[field].(type) {
				case nil:
				case string:
					if err := CheckQuantity(q); err != nil {
						return nil, fmt.Errorf("zone %d: resource %d: %s: %w", i, j, field, err)
					}
				case int64, float64:
				default:
					return nil, fmt.Errorf("zone %d: resource %d: %s is a %T, not a quantity", i, j, field, q)
				}
			}
		}
	}
	out := &v1alpha2.NodeResourceTopology{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, out); err != nil {
		return nil, err
	}
	return out, nil
}
