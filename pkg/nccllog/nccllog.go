// Package nccllog reads what NCCL says it chose in a process's log when it
// runs with NCCL_DEBUG=INFO: the network transport, the RDMA devices (HCAs)
// its IB transport opened, whether GPUDirect RDMA is on for each, and
// whether its channels run over GPUDirect RDMA. nicaffinity's doctor and
// kubectl plugin compare that with the plan and with what the exporter
// observed, so a user learns from NCCL's own words whether the job got
// what it was placed for.
//
// A container's log is outside data: it may be huge, binary or written to
// mislead. Parse reads at most MaxBytes, looks at lines of at most
// MaxLineBytes that carry "NCCL INFO", keeps at most MaxHCAs devices, and
// its work grows linearly with what it reads.
package nccllog

import (
	"bufio"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Caps on what Parse reads.
const (
	MaxBytes     = 8 << 20
	MaxLineBytes = 4 << 10
	MaxHCAs      = 64
)

// HCA is one RDMA device NCCL's IB transport opened.
type HCA struct {
	// Index is NCCL's index of the device ("[0]mlx5_0:1/IB" is 0).
	Index int    `json:"index"`
	Name  string `json:"name"`
	Port  int    `json:"port"`
	// Link is IB or RoCE.
	Link string `json:"link,omitempty"`
	// GDR is whether NCCL said GPUDirect RDMA is enabled for it: "on",
	// "off", or "" when it did not say.
	GDR string `json:"gdr,omitempty"`
}

// Report is what NCCL said.
type Report struct {
	// Lines is how many NCCL INFO lines were read; 0: NCCL said nothing
	// (not run, or NCCL_DEBUG is not INFO).
	Lines   int    `json:"lines"`
	Version string `json:"version,omitempty"`
	// Network is the transport NCCL chose ("IB", "Socket", or a plugin's
	// name), "" when it did not say.
	Network string `json:"network,omitempty"`
	HCAs    []HCA  `json:"hcas,omitempty"`
	// Channels over the IB transport with and without GPUDirect RDMA
	// ("via NET/IB/0/GDRDMA" against "via NET/IB/0").
	ChannelsGDR   int `json:"channelsGDR"`
	ChannelsNoGDR int `json:"channelsNoGDR"`
	// Truncated: the log was longer than MaxBytes (the rest unread).
	Truncated bool `json:"truncated,omitempty"`
}

var (
	usingIB = regexp.MustCompile(`\[(\d{1,3})\]([A-Za-z0-9_.\-]{1,64}):(\d{1,3})/(IB|RoCE)`)
	gdrLine = regexp.MustCompile(`GPU Direct RDMA (Enabled|Disabled) for HCA (\d{1,3}) '([A-Za-z0-9_.\-]{1,64})'`)
	network = regexp.MustCompile(`NCCL INFO Using network ([A-Za-z0-9_.\-]{1,64})`)
	version = regexp.MustCompile(`NCCL version ([0-9][0-9A-Za-z.+\-]{0,63})`)
	viaIB   = regexp.MustCompile(`via NET/IB/\d{1,3}(/GDRDMA)?`)
)

// Parse reads a log. Only a read error is an error; what is not NCCL's is
// skipped, and so is the line MaxBytes cuts.
func Parse(r io.Reader) (Report, error) {
	var rep Report
	cr := &countingReader{r: io.LimitReader(r, MaxBytes+1)}
	br := bufio.NewReaderSize(cr, 64<<10)
	for {
		line, ok, err := readLine(br)
		if err != nil && err != io.EOF {
			return rep, err
		}
		if cr.n > MaxBytes {
			rep.Truncated = true
			if err == io.EOF {
				break // the line the cap cut in two is not read
			}
		}
		if ok {
			rep.line(line)
		}
		if err == io.EOF {
			break
		}
	}
	slices.SortFunc(rep.HCAs, func(a, b HCA) int { return a.Index - b.Index })
	return rep, nil
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// readLine reads one line, without its newline. ok is false for a line
// longer than MaxLineBytes (its text is dropped); err is io.EOF at the end
// of the input, with the last line (unterminated) in line.
func readLine(br *bufio.Reader) (line string, ok bool, err error) {
	var b []byte
	long := false
	for {
		chunk, err := br.ReadSlice('\n')
		if !long && len(b)+len(chunk) <= MaxLineBytes+1 {
			b = append(b, chunk...)
		} else {
			long, b = true, nil
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		return strings.TrimRight(string(b), "\r\n"), !long, err
	}
}

func (rep *Report) line(s string) {
	if !strings.Contains(s, "NCCL INFO") && !strings.Contains(s, "NCCL version") {
		return
	}
	rep.Lines++
	switch {
	case strings.Contains(s, "NET/IB : Using"):
		for _, m := range usingIB.FindAllStringSubmatch(s, MaxHCAs) {
			idx, _ := strconv.Atoi(m[1])
			port, _ := strconv.Atoi(m[3])
			h := rep.hca(idx, m[2])
			h.Port, h.Link = port, m[4]
		}
	case strings.Contains(s, "GPU Direct RDMA"):
		if m := gdrLine.FindStringSubmatch(s); m != nil {
			idx, _ := strconv.Atoi(m[2])
			rep.hca(idx, m[3]).GDR = map[string]string{"Enabled": "on", "Disabled": "off"}[m[1]]
		}
	case strings.Contains(s, "Using network"):
		if m := network.FindStringSubmatch(s); m != nil {
			rep.Network = m[1]
		}
	case strings.Contains(s, "NCCL version"):
		if m := version.FindStringSubmatch(s); m != nil && rep.Version == "" {
			rep.Version = m[1]
		}
	case strings.Contains(s, "via NET/IB/"):
		for _, m := range viaIB.FindAllStringSubmatch(s, 4) {
			if m[1] != "" {
				rep.ChannelsGDR++
			} else {
				rep.ChannelsNoGDR++
			}
		}
	}
}

// hca is the device of that index, added when new; past MaxHCAs, or when
// the index is already another device's (a log that contradicts itself
// keeps its first word), a scratch value nothing keeps.
func (rep *Report) hca(idx int, name string) *HCA {
	for i := range rep.HCAs {
		if rep.HCAs[i].Index == idx {
			if rep.HCAs[i].Name != name {
				return &HCA{}
			}
			return &rep.HCAs[i]
		}
	}
	if len(rep.HCAs) >= MaxHCAs {
		return &HCA{}
	}
	rep.HCAs = append(rep.HCAs, HCA{Index: idx, Name: name})
	return &rep.HCAs[len(rep.HCAs)-1]
}

// Names are the devices' names, in NCCL's order.
func (rep Report) Names() []string {
	var out []string
	for _, h := range rep.HCAs {
		out = append(out, h.Name)
	}
	return out
}
