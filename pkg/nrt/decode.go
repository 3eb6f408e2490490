package nrt

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/k8stopologyawareschedwg/noderesourcetopology-api/pkg/apis/topology/v1alpha2"
	"k8s.io/apimachinery/pkg/api/resource"
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
// delivers it) into the typed object. It reads the object by hand, in one
// pass that checks every cap of compile.go (per zone and in all), every
// name and value length, and every quantity as a string before it parses
// it: the work is bounded before it is done. runtime's reflective
// converter cost ten times as much on the largest object the caps admit
// (measurements/hostile-object.md); TestDecodeMatchesConverter holds the two
// equal on real objects.
func Decode(u *unstructured.Unstructured) (*v1alpha2.NodeResourceTopology, error) {
	obj := u.Object
	out := &v1alpha2.NodeResourceTopology{}
	if md, ok := obj["metadata"].(map[string]any); ok {
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(md, &out.ObjectMeta); err != nil {
			return nil, fmt.Errorf("metadata: %w", err)
		}
	}
	out.APIVersion, out.Kind = u.GetAPIVersion(), u.GetKind()
	var err error
	if out.TopologyPolicies, err = decodeStrings("topologyPolicies", obj["topologyPolicies"]); err != nil {
		return nil, err
	}
	if out.Attributes, err = decodeAttributes("", obj, MaxAttributes); err != nil {
		return nil, err
	}
	attrs := len(out.Attributes)
	zones, err := list("", "zones", obj, MaxZones)
	if err != nil {
		return nil, err
	}
	if zones != nil {
		out.Zones = make(v1alpha2.ZoneList, len(zones))
	}
	costs, resources := 0, 0
	for i, zm := range zones {
		z := &out.Zones[i]
		if z.Name, err = str(loc{kind: "zone", j: i}, "name", zm); err != nil {
			return nil, err
		}
		where := "zone " + z.Name
		if z.Name == "" {
			where = fmt.Sprintf("zone %d", i)
		}
		if z.Type, err = str(loc{where: where}, "type", zm); err != nil {
			return nil, err
		}
		if z.Parent, err = str(loc{where: where}, "parent", zm); err != nil {
			return nil, err
		}
		if z.Attributes, err = decodeAttributes(where+": ", zm, MaxAttributesPerZone); err != nil {
			return nil, err
		}
		if attrs += len(z.Attributes); attrs > MaxAttributes {
			return nil, fmt.Errorf("more than %d attributes in all", MaxAttributes)
		}
		if z.Costs, err = decodeCosts(where, zm); err != nil {
			return nil, err
		}
		if costs += len(z.Costs); costs > MaxCosts {
			return nil, fmt.Errorf("more than %d costs in all", MaxCosts)
		}
		if z.Resources, err = decodeResources(where, zm); err != nil {
			return nil, err
		}
		if resources += len(z.Resources); resources > MaxResources {
			return nil, fmt.Errorf("more than %d resources in all", MaxResources)
		}
	}
	return out, nil
}

// list reads obj[field] as a list of at most limit objects (nil when
// absent).
func list(where, field string, obj map[string]any, limit int) ([]map[string]any, error) {
	raw, ok := obj[field]
	if !ok || raw == nil {
		return nil, nil
	}
	if where != "" {
		where += ": "
	}
	l, ok := raw.([]any)
	if !ok {
		return nil, fmt.Errorf("%s%s is a %T, not a list", where, field, raw)
	}
	if len(l) > limit {
		return nil, fmt.Errorf("%s%d %s: at most %d", where, len(l), field, limit)
	}
	out := make([]map[string]any, len(l))
	for j, e := range l {
		m, ok := e.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("%s%s %d is not an object", where, field, j)
		}
		out[j] = m
	}
	return out, nil
}

// loc names an entry of a list in errors ("zone gpu-0: cost 3"), built
// only when there is an error: Decode reads thousands of entries.
type loc struct {
	where, kind string
	j           int
}

func (l loc) String() string {
	if l.kind == "" {
		return l.where
	}
	return fmt.Sprintf("%s%s %d", l.where, l.kind, l.j)
}

// str reads obj[field] as a name: a string of at most MaxNameLen bytes,
// "" when absent.
func str(where loc, field string, obj map[string]any) (string, error) {
	return strMax(where, field, obj, MaxNameLen)
}

func strMax(where loc, field string, obj map[string]any, limit int) (string, error) {
	raw, ok := obj[field]
	if !ok || raw == nil {
		return "", nil
	}
	s, ok := raw.(string)
	if !ok {
		return "", fmt.Errorf("%s: %s is a %T, not a string", where, field, raw)
	}
	if len(s) > limit {
		return "", fmt.Errorf("%s: %s of %d bytes, at most %d", where, field, len(s), limit)
	}
	return s, nil
}

func decodeStrings(field string, raw any) ([]string, error) {
	if raw == nil {
		return nil, nil
	}
	l, ok := raw.([]any)
	if !ok {
		return nil, fmt.Errorf("%s is a %T, not a list", field, raw)
	}
	if len(l) > MaxResourcesPerZone {
		return nil, fmt.Errorf("%d %s: at most %d", len(l), field, MaxResourcesPerZone)
	}
	out := make([]string, len(l))
	for i, e := range l {
		s, ok := e.(string)
		if !ok || len(s) > MaxNameLen {
			return nil, fmt.Errorf("%s %d is not a string of at most %d bytes", field, i, MaxNameLen)
		}
		out[i] = s
	}
	return out, nil
}

// decodeAttributes reads the attributes of obj (the object, where is "",
// or a zone).
func decodeAttributes(where string, obj map[string]any, limit int) (v1alpha2.AttributeList, error) {
	l, err := list(strings.TrimSuffix(where, ": "), "attributes", obj, limit)
	if err != nil || l == nil {
		return nil, err
	}
	out := make(v1alpha2.AttributeList, len(l))
	for j, a := range l {
		at := loc{where, "attribute", j}
		if out[j].Name, err = str(at, "name", a); err != nil {
			return nil, err
		}
		if out[j].Value, err = strMax(at, "value", a, MaxValueLen); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func decodeCosts(where string, zone map[string]any) (v1alpha2.CostList, error) {
	l, err := list(where, "costs", zone, MaxCostsPerZone)
	if err != nil || l == nil {
		return nil, err
	}
	out := make(v1alpha2.CostList, len(l))
	where += ": "
	for j, c := range l {
		at := loc{where, "cost", j}
		if out[j].Name, err = str(at, "name", c); err != nil {
			return nil, err
		}
		switch v := c["value"].(type) {
		case nil:
		case int64:
			out[j].Value = v
		case float64:
			if v != float64(int64(v)) {
				return nil, fmt.Errorf("%s: value %v is not an integer", at, v)
			}
			out[j].Value = int64(v)
		default:
			return nil, fmt.Errorf("%s: value is a %T, not an integer", at, v)
		}
	}
	return out, nil
}

func decodeResources(where string, zone map[string]any) (v1alpha2.ResourceInfoList, error) {
	l, err := list(where, "resources", zone, MaxResourcesPerZone)
	if err != nil || l == nil {
		return nil, err
	}
	out := make(v1alpha2.ResourceInfoList, len(l))
	where += ": "
	for j, r := range l {
		at := loc{where, "resource", j}
		if out[j].Name, err = str(at, "name", r); err != nil {
			return nil, err
		}
		for _, q := range []struct {
			field string
			to    *resource.Quantity
		}{{"capacity", &out[j].Capacity}, {"allocatable", &out[j].Allocatable}, {"available", &out[j].Available}} {
			if *q.to, err = quantity(at, q.field, r[q.field]); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// quantity parses a quantity as JSON would give it (a string or a number),
// checked as a string first (CheckQuantity).
func quantity(where loc, field string, raw any) (resource.Quantity, error) {
	var s string
	switch v := raw.(type) {
	case nil:
		return resource.Quantity{}, nil
	case string:
		s = v
	case int64:
		return *resource.NewQuantity(v, resource.DecimalSI), nil
	case float64:
		b, err := json.Marshal(v)
		if err != nil {
			return resource.Quantity{}, fmt.Errorf("%s: %s: %w", where, field, err)
		}
		s = string(b)
	default:
		return resource.Quantity{}, fmt.Errorf("%s: %s is a %T, not a quantity", where, field, raw)
	}
	if err := CheckQuantity(s); err != nil {
		return resource.Quantity{}, fmt.Errorf("%s: %s: %w", where, field, err)
	}
	q, err := resource.ParseQuantity(s)
	if err != nil {
		return resource.Quantity{}, fmt.Errorf("%s: %s: %w", where, field, err)
	}
	return q, nil
}
