package sysfs_test

import (
	"io/fs"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/nicaffinity/nicaffinity/pkg/topology/sysfs"
)

// TestFSLinksStayInside: read from an fs.FS, a device link that leaves the
// tree (climbing above its root, or absolute) or loops is an error naming
// it, never a read outside the tree or a hang.
func TestFSLinksStayInside(t *testing.T) {
	link := func(target string) *fstest.MapFile {
		return &fstest.MapFile{Data: []byte(target), Mode: fs.ModeSymlink | 0o777}
	}
	const dev = "bus/pci/devices/0000:01:00.0"
	tests := []struct {
		name string
		fsys fstest.MapFS
		want string
	}{
		{"climbs above the root", fstest.MapFS{dev: link("../../../../etc")}, "leads outside the tree"},
		{"absolute", fstest.MapFS{dev: link("/etc")}, "leads outside the tree"},
		{"a loop", fstest.MapFS{dev: link("0000:01:00.0")}, "more than 40 links"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := sysfs.New(sysfs.WithFS(tc.fsys)).Read()
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "0000:01:00.0") {
				t.Errorf("Read = %v; want an error naming the device and %q", err, tc.want)
			}
		})
	}
}
