package nccllog

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// The logs under testdata are in the formats NCCL 2.x prints with
// NCCL_DEBUG=INFO, as users post them in NCCL's issues ("NET/IB : Using
// [0]mlx5_0:1/IB", "GPU Direct RDMA Disabled for HCA 0 'mlx5_0'", "via
// NET/IB/0/GDRDMA"), with hosts and addresses of their own.
func TestParse(t *testing.T) {
	for _, tc := range []struct {
		file string
		want Report
	}{
		{"ib-gdr.log", Report{Lines: 14, Version: "2.21.5+cuda12.4", Network: "IB",
			HCAs:        []HCA{{Index: 0, Name: "mlx5_0", Port: 1, Link: "IB", GDR: "on"}, {Index: 1, Name: "mlx5_3", Port: 1, Link: "IB", GDR: "on"}},
			ChannelsGDR: 3}},
		{"roce-gdr-disabled.log", Report{Lines: 10, Network: "IB",
			HCAs:          []HCA{{Index: 0, Name: "mlx5_0", Port: 1, Link: "RoCE", GDR: "off"}, {Index: 1, Name: "mlx5_1", Port: 1, Link: "RoCE", GDR: "off"}},
			ChannelsNoGDR: 2}},
		{"socket.log", Report{Lines: 4, Network: "Socket"}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join("testdata", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			got, err := Parse(bytes.NewReader(b))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want,+got):\n%s", diff)
			}
		})
	}
}

// endless is an io.Reader of one repeated chunk without end.
type endless struct{ chunk []byte }

func (e endless) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		n += copy(p[n:], e.chunk)
	}
	return n, nil
}

// TestParseHostile: logs that are endless, one huge line, binary, or that
// name more devices than any node has, or contradict themselves, are read
// within the caps and never make more than they say.
func TestParseHostile(t *testing.T) {
	many := &strings.Builder{}
	many.WriteString("h:1:1 [0] NCCL INFO NET/IB : Using")
	for i := range 100 {
		many.WriteString(" [" + itoa(i) + "]mlx5_" + itoa(i) + ":1/IB")
	}
	for _, tc := range []struct {
		name  string
		in    io.Reader
		check func(Report) string
	}{
		{"endless NCCL lines", endless{[]byte("h:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] via NET/IB/0/GDRDMA\n")}, func(r Report) string {
			if !r.Truncated || r.ChannelsGDR == 0 {
				return "want truncated, with channels counted"
			}
			return ""
		}},
		{"one endless line", endless{[]byte("NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ")}, func(r Report) string {
			if !r.Truncated || len(r.HCAs) != 0 {
				return "want truncated and nothing read from a line past MaxLineBytes"
			}
			return ""
		}},
		{"binary", endless{[]byte{0, 0xff, 0xfe, '\n', 0x1b, '['}}, func(r Report) string {
			if r.Lines != 0 {
				return "binary read as NCCL lines"
			}
			return ""
		}},
		{"100 devices", strings.NewReader(many.String() + "\n"), func(r Report) string {
			if len(r.HCAs) != MaxHCAs {
				return "want MaxHCAs devices kept"
			}
			return ""
		}},
		{"contradiction", strings.NewReader("NCCL INFO NET/IB : Using [0]mlx5_0:1/IB\nNCCL INFO NET/IB : GPU Direct RDMA Enabled for HCA 0 'mlx5_9'\n"), func(r Report) string {
			if len(r.HCAs) != 1 || r.HCAs[0].Name != "mlx5_0" || r.HCAs[0].GDR != "" {
				return "a line naming HCA 0 as another device changed it"
			}
			return ""
		}},
		{"garbled", strings.NewReader("NCCL INFO NET/IB : Using [x]mlx5_0:y/IB [99999]a:1/IB\nNCCL INFO GPU Direct RDMA Enabled for HCA -1 ''\n"), func(r Report) string {
			if len(r.HCAs) != 0 {
				return "garbled devices read"
			}
			return ""
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if why := tc.check(got); why != "" {
				t.Errorf("%s: %+v", why, summary(got))
			}
		})
	}
}

func summary(r Report) Report {
	if len(r.HCAs) > 3 {
		r.HCAs = r.HCAs[:3]
	}
	return r
}

func itoa(i int) string { return strconv.Itoa(i) }

// FuzzParse: any input parses within the caps.
func FuzzParse(f *testing.F) {
	for _, name := range []string{"ib-gdr.log", "roce-gdr-disabled.log", "socket.log"} {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := Parse(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		if len(r.HCAs) > MaxHCAs || r.Lines > len(b) {
			t.Fatalf("past the caps: %+v", r)
		}
	})
}
