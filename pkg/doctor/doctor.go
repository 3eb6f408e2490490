// Package doctor runs the bottom-up GPUDirect RDMA checklist: host (driver
// and devices), GPUDirect, ports and addresses, topology; then the cluster,
// a pod, and a pair test between two nodes. Layers are checked in order and
// checking stops at the first layer that fails: a fault low down makes
// every check above it fail for the wrong reason.
//
// The checks are pure functions of what was read (a topology, a snapshot of
// API objects); reading is the callers' (cmd/nicaffinity, kube.go).
package doctor

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// Status of one check.
type Status string

const (
	Pass    Status = "pass"
	Fail    Status = "fail"
	Warn    Status = "warn"    // works, but not as it should for full speed
	Unknown Status = "unknown" // could not be read; never guessed
	Info    Status = "info"    // a value to know, nothing to judge
	Skipped Status = "skipped" // a lower layer failed
)

var marks = map[Status]string{Pass: "✓", Fail: "✗", Warn: "!", Unknown: "?", Info: "·", Skipped: "-"}

// Check is one line of the checklist.
type Check struct {
	Layer  string `json:"layer"`
	Name   string `json:"name"`
	Status Status `json:"status"`
	Detail string `json:"detail,omitempty"`
	// Fix is the one thing to do about a failure or warning.
	Fix string `json:"fix,omitempty"`
}

// Report is a checklist run.
type Report struct {
	Subject string  `json:"subject"`
	Checks  []Check `json:"checks"`
	// FailedLayer is the first layer with a failure ("" when none).
	FailedLayer string `json:"failedLayer,omitempty"`
	// Steps are commands and manifests to run next (doctor pair).
	Steps []Step `json:"steps,omitempty"`
}

// Step is one thing for the user to run.
type Step struct {
	Title string `json:"title"`
	Text  string `json:"text"`
}

// OK reports whether no check failed.
func (r *Report) OK() bool { return r.FailedLayer == "" }

// builder collects checks layer by layer and skips the layers after the
// first one with a failure.
type builder struct {
	r         Report
	layer     string
	keepGoing bool
}

func newBuilder(subject string) *builder { return &builder{r: Report{Subject: subject}} }

// startLayer begins a layer; false when an earlier layer failed (the
// caller then adds no checks, and skip records the layer as skipped).
func (b *builder) startLayer(name string) bool {
	b.layer = name
	if b.r.FailedLayer != "" && !b.keepGoing {
		b.r.Checks = append(b.r.Checks, Check{Layer: name, Name: "not checked", Status: Skipped, Detail: "fix the " + b.r.FailedLayer + " layer first"})
		return false
	}
	return true
}

func (b *builder) add(c Check) {
	c.Layer = b.layer
	b.r.Checks = append(b.r.Checks, c)
	if c.Status == Fail && b.r.FailedLayer == "" {
		b.r.FailedLayer = b.layer
	}
}

func (b *builder) pass(name, detail string) { b.add(Check{Name: name, Status: Pass, Detail: detail}) }
func (b *builder) fail(name, detail, fix string) {
	b.add(Check{Name: name, Status: Fail, Detail: detail, Fix: fix})
}
func (b *builder) warn(name, detail, fix string) {
	b.add(Check{Name: name, Status: Warn, Detail: detail, Fix: fix})
}
func (b *builder) unknown(name, detail, fix string) {
	b.add(Check{Name: name, Status: Unknown, Detail: detail, Fix: fix})
}
func (b *builder) info(name, detail string) { b.add(Check{Name: name, Status: Info, Detail: detail}) }

func (b *builder) report() Report { return b.r }

// WriteText prints the report as a checklist with ✓ ✗ ! ? marks.
func (r Report) WriteText(w io.Writer) error {
	var sb strings.Builder
	fmt.Fprintf(&sb, "%s\n", r.Subject)
	layer := ""
	for _, c := range r.Checks {
		if c.Layer != layer {
			layer = c.Layer
			fmt.Fprintf(&sb, "\n%s\n", layer)
		}
		line := fmt.Sprintf("  %s %s", marks[c.Status], c.Name)
		if c.Detail != "" {
			line += ": " + c.Detail
		}
		sb.WriteString(line + "\n")
		if c.Fix != "" {
			fmt.Fprintf(&sb, "      fix: %s\n", c.Fix)
		}
	}
	for i, s := range r.Steps {
		fmt.Fprintf(&sb, "\n%d. %s\n%s\n", i+1, s.Title, indent(s.Text))
	}
	switch {
	case r.FailedLayer != "":
		fmt.Fprintf(&sb, "\nFAILED at the %s layer: fix it, then run doctor again.\n", r.FailedLayer)
	case len(r.Steps) == 0:
		sb.WriteString("\nNo failures.\n")
	}
	_, err := io.WriteString(w, sb.String())
	return err
}

// WriteJSON prints the report as JSON.
func (r Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(r)
}

func indent(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range lines {
		lines[i] = "    " + l
	}
	return strings.Join(lines, "\n")
}
