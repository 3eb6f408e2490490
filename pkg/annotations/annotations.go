// Package annotations holds the pod annotations nicaffinity reads and writes,
// their JSON forms and their parsers. The scheduler writes Allocation, the
// exporter writes Observed, users set the request annotations.
package annotations

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/nicaffinity/nicaffinity/pkg/topology"
)

const (
	// MaxLevel is the worst GPU-NIC level a pod accepts: PIX, PXB, P2C, PHB, NODE or SYS.
	MaxLevel = "nicaffinity.io/max-level"
	// Policy is "required" (filter nodes), "preferred" (only score) or
	// "bounded" (filter nodes until the pod has waited AlignmentWait for
	// aligned GPUs, then only score).
	Policy = "nicaffinity.io/policy"
	// AlignmentWait is how long a bounded pod waits for aligned GPUs
	// (a Go duration: "10m"); it makes a pod that sets no policy bounded.
	AlignmentWait = "nicaffinity.io/alignment-wait"
	// RDMA set to "true" marks a pod that needs a NIC without requesting an RDMA resource.
	RDMA = "nicaffinity.io/rdma"
	// Rails is how a pod of a multi-pod job holds to its job's rails:
	// required (only GPUs whose NICs are on the rails the job's other pods
	// use), preferred (the default: score them first) or ignore.
	Rails = "nicaffinity.io/rails"
	// AllocationKey is written by the scheduler at PreBind.
	AllocationKey = "nicaffinity.io/allocation"
	// ObservedKey is written by the topology exporter from what the kubelet really handed out.
	ObservedKey = "nicaffinity.io/observed"
)

// Policies, of nicaffinity.io/policy and nicaffinity.io/rails.
const (
	PolicyRequired  = "required"
	PolicyPreferred = "preferred"
	// PolicyBounded is a placement policy only: required for a bounded
	// wait, then preferred.
	PolicyBounded = "bounded"
	// PolicyIgnore is a rails policy only.
	PolicyIgnore = "ignore"
)

// MaxPlanRails bounds the rails a plan names: one per planned NIC at most.
const MaxPlanRails = 64

// MaxValueBytes bounds an allocation or observed value, and MaxDevices the
// GPUs, UUIDs and NICs one names (as many as a node's object may hold: its
// GPU and NIC zone caps): parsing a hostile value costs at most this much,
// whoever wrote it. The admission policies refuse larger values.
const (
	MaxValueBytes = 16 << 10
	MaxDevices    = 64
)

// tooLarge says what bound a value breaks, or "".
func tooLarge(key, s string) error {
	if len(s) > MaxValueBytes {
		return fmt.Errorf("annotation %s: %d bytes, at most %d", key, len(s), MaxValueBytes)
	}
	return nil
}

// tooMany checks the device lists of a parsed value.
func tooMany(key string, lists map[string]int) error {
	for field, n := range lists {
		if n > MaxDevices {
			return fmt.Errorf("annotation %s: %d %s, at most %d", key, n, field, MaxDevices)
		}
	}
	return nil
}

// Allocation is the scheduler's plan for a pod.
type Allocation struct {
	Node string `json:"node"`
	// GPUs by PCI bus ID.
	GPUs []string `json:"gpus"`
	// UUIDs of the same GPUs, in the same order, where the node's object
	// names them (NVML): the NVIDIA device plugin's device IDs, which the
	// allocation proxy answers the kubelet with.
	UUIDs []string `json:"uuids,omitempty"`
	// NICs by RDMA device name.
	NICs  []string `json:"nics,omitempty"`
	Level string   `json:"level,omitempty"`
	// Rails are the rails of the planned NICs, sorted, each once; empty
	// when the node publishes none.
	Rails []string `json:"rails,omitempty"`
	// NRTGeneration is the generation of the NodeResourceTopology the plan came from.
	NRTGeneration int64 `json:"nrtGeneration"`
}

// Observed is what the exporter saw a pod really get.
type Observed struct {
	GPUs []ObservedGPU `json:"gpus"`
	// NICs are the RDMA devices the pod should use (NCCL_IB_HCA), nearest first.
	NICs []string `json:"nics,omitempty"`
	// Level is the worst of the GPUs' levels to their nearest NIC ("" without RDMA).
	Level   string `json:"level,omitempty"`
	Aligned bool   `json:"aligned"`
	// GPUDirect lists why GPUDirect RDMA cannot run on the pod's GPU-NIC
	// paths (ACS redirect, nvidia-peermem, a RoCE port without a v2 GID);
	// a pod with any is not aligned, whatever its level.
	GPUDirect []string `json:"gpudirect,omitempty"`
	// Plan says how the node's choice compares with the scheduler's Allocation:
	// "matched", "differs" or "none" (no plan on the pod).
	Plan string `json:"plan"`
}

// ObservedGPU is one GPU the pod got and its nearest NIC.
type ObservedGPU struct {
	BusID string `json:"busID"`
	UUID  string `json:"uuid,omitempty"`
	NIC   string `json:"nic,omitempty"`
	Level string `json:"level,omitempty"`
}

// ParseAllocation reads an Allocation annotation value.
func ParseAllocation(s string) (Allocation, error) {
	var a Allocation
	if err := tooLarge(AllocationKey, s); err != nil {
		return a, err
	}
	dec := json.NewDecoder(strings.NewReader(s))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&a); err != nil {
		return a, decodeError(AllocationKey, err)
	}
	if a.Node == "" {
		return a, fmt.Errorf("annotation %s: no node", AllocationKey)
	}
	if err := tooMany(AllocationKey, map[string]int{"gpus": len(a.GPUs), "uuids": len(a.UUIDs), "nics": len(a.NICs)}); err != nil {
		return a, err
	}
	for i, g := range a.GPUs {
		n, err := topology.NormalizeBusID(g)
		if err != nil {
			return a, fmt.Errorf("annotation %s: gpus[%d]: %w", AllocationKey, i, err)
		}
		a.GPUs[i] = n
	}
	if len(a.UUIDs) > 0 && len(a.UUIDs) != len(a.GPUs) {
		return a, fmt.Errorf("annotation %s: %d uuids for %d gpus", AllocationKey, len(a.UUIDs), len(a.GPUs))
	}
	// A plan names each device once: a repeated one would be handed to
	// the kubelet twice (the allocation proxy follows plans).
	for field, list := range map[string][]string{"gpus": a.GPUs, "uuids": a.UUIDs, "nics": a.NICs} {
		seen := make(map[string]bool, len(list))
		for i, d := range list {
			if d != "" && seen[d] {
				return a, fmt.Errorf("annotation %s: %s[%d]: %.64q appears twice", AllocationKey, field, i, d)
			}
			seen[d] = true
		}
	}
	if a.Level != "" {
		if _, err := topology.ParseLevel(a.Level); err != nil {
			return a, fmt.Errorf("annotation %s: level: %w", AllocationKey, err)
		}
	}
	if len(a.Rails) > MaxPlanRails {
		return a, fmt.Errorf("annotation %s: %d rails, at most %d", AllocationKey, len(a.Rails), MaxPlanRails)
	}
	for i, r := range a.Rails {
		if r == "" || len(r) > 63 || strings.ContainsFunc(r, func(c rune) bool { return c <= ' ' || c >= 0x7f }) || i > 0 && r <= a.Rails[i-1] {
			return a, fmt.Errorf("annotation %s: rails[%d]: %.70q is not a rail name in order (sorted, each once, 1-63 printable bytes)", AllocationKey, i, r)
		}
	}
	return a, nil
}

// maxDecodeError bounds a JSON decoding error's text: encoding/json quotes
// an unknown field's name whole, and these errors reach Events and logs.
const maxDecodeError = 160

// decodeError is the JSON decoding error err of the annotation key, cut to
// maxDecodeError bytes.
func decodeError(key string, err error) error {
	msg := err.Error()
	if len(msg) > maxDecodeError {
		msg = strings.ToValidUTF8(msg[:maxDecodeError], "") + "..."
	}
	return fmt.Errorf("annotation %s: %s", key, msg)
}

// ParseObserved reads an Observed annotation value.
func ParseObserved(s string) (Observed, error) {
	var o Observed
	if err := tooLarge(ObservedKey, s); err != nil {
		return o, err
	}
	dec := json.NewDecoder(strings.NewReader(s))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&o); err != nil {
		return o, decodeError(ObservedKey, err)
	}
	if err := tooMany(ObservedKey, map[string]int{"gpus": len(o.GPUs), "nics": len(o.NICs), "gpudirect reasons": len(o.GPUDirect)}); err != nil {
		return o, err
	}
	for i, g := range o.GPUs {
		n, err := topology.NormalizeBusID(g.BusID)
		if err != nil {
			return o, fmt.Errorf("annotation %s: gpus[%d].busID: %w", ObservedKey, i, err)
		}
		o.GPUs[i].BusID = n
		if g.Level != "" {
			if _, err := topology.ParseLevel(g.Level); err != nil {
				return o, fmt.Errorf("annotation %s: gpus[%d].level: %w", ObservedKey, i, err)
			}
		}
	}
	if o.Level != "" {
		if _, err := topology.ParseLevel(o.Level); err != nil {
			return o, fmt.Errorf("annotation %s: level: %w", ObservedKey, err)
		}
	}
	switch o.Plan {
	case "matched", "differs", "none":
	default:
		return o, fmt.Errorf("annotation %s: plan %.64q: want matched, differs or none", ObservedKey, o.Plan)
	}
	return o, nil
}

// ParseMaxLevel reads a max-level annotation value (PIX, PXB, PHB, NODE, SYS).
func ParseMaxLevel(s string) (topology.Level, error) {
	l, err := topology.ParseLevel(strings.ToUpper(strings.TrimSpace(s)))
	if err != nil || l < topology.LevelPIX {
		return 0, fmt.Errorf("annotation %s=%.64q: want one of PIX, PXB, P2C, PHB, NODE, SYS", MaxLevel, s)
	}
	return l, nil
}

// ParsePolicy reads a policy annotation value.
func ParsePolicy(s string) (string, error) {
	switch p := strings.ToLower(strings.TrimSpace(s)); p {
	case PolicyRequired, PolicyPreferred, PolicyBounded:
		return p, nil
	}
	return "", fmt.Errorf("annotation %s=%.64q: want required, preferred or bounded", Policy, s)
}

// MaxAlignmentWait bounds a wait for aligned GPUs: past a day a pod is
// better served by preferred, and the plugin keeps a timer per waiting job.
const MaxAlignmentWait = 24 * time.Hour

// ParseAlignmentWait reads an alignment-wait value: a Go duration from 1s
// to MaxAlignmentWait.
func ParseAlignmentWait(s string) (time.Duration, error) {
	if len(s) > 32 {
		return 0, fmt.Errorf("annotation %s=%.32q...: %d bytes, at most 32", AlignmentWait, s, len(s))
	}
	d, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		return 0, fmt.Errorf("annotation %s=%q: want a duration such as 10m", AlignmentWait, s)
	}
	if err := CheckAlignmentWait(d); err != nil {
		return 0, fmt.Errorf("annotation %s=%q: %w", AlignmentWait, s, err)
	}
	return d, nil
}

// CheckAlignmentWait says why d is no wait for aligned GPUs, or nil.
func CheckAlignmentWait(d time.Duration) error {
	if d < time.Second || d > MaxAlignmentWait {
		return fmt.Errorf("must be between 1s and %s", MaxAlignmentWait)
	}
	return nil
}

// ParseRails reads a rails annotation value.
func ParseRails(s string) (string, error) {
	switch p := strings.ToLower(strings.TrimSpace(s)); p {
	case PolicyRequired, PolicyPreferred, PolicyIgnore:
		return p, nil
	}
	return "", fmt.Errorf("annotation %s=%.64q: want required, preferred or ignore", Rails, s)
}

// Marshal writes v as compact JSON.
func Marshal(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only plain structs of strings and numbers come here
	}
	return string(b)
}
