package machines

import (
	"errors"
	"io/fs"
	"testing"
	"testing/fstest"
)

// TestMemFS: the in-memory tree keeps the fs.FS contract (fstest.TestFS,
// links followed on Open), reads links without following them, writes
// through links into their targets, and refuses loops and links out of
// the tree.
func TestMemFS(t *testing.T) {
	m := newMemFS()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(m.writeFile("devices/pci0000:00/0000:00:01.0/vendor", []byte("0x10de\n")))
	must(m.symlink("../../../devices/pci0000:00/0000:00:01.0", "bus/pci/devices/0000:00:01.0"))
	must(m.writeFile("bus/pci/devices/0000:00:01.0/class", []byte("0x030200\n"))) // through the link
	if err := fstest.TestFS(m, "devices/pci0000:00/0000:00:01.0/vendor", "devices/pci0000:00/0000:00:01.0/class"); err != nil {
		t.Fatal(err)
	}
	if b, err := fs.ReadFile(m, "bus/pci/devices/0000:00:01.0/vendor"); err != nil || string(b) != "0x10de\n" {
		t.Errorf("reading through a link: %q, %v", b, err)
	}
	must(m.symlink("loop-b", "loop-a"))
	must(m.symlink("loop-a", "loop-b"))
	must(m.symlink("/etc", "abs"))
	if target, err := m.ReadLink("bus/pci/devices/0000:00:01.0"); err != nil || target != "../../../devices/pci0000:00/0000:00:01.0" {
		t.Errorf("ReadLink = %q, %v", target, err)
	}
	if info, err := m.Lstat("bus/pci/devices/0000:00:01.0"); err != nil || info.Mode()&fs.ModeSymlink == 0 {
		t.Errorf("Lstat of a link: %v, %v; want the link itself", info, err)
	}
	if _, err := m.Open("loop-a/x"); !errors.Is(err, errLoop) {
		t.Errorf("a loop of links: %v, want %v", err, errLoop)
	}
	if _, err := m.Open("abs/passwd"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("an absolute link: %v, want not found inside the tree", err)
	}
	must(m.removeAll("bus"))
	if _, err := fs.Stat(m, "devices/pci0000:00/0000:00:01.0/class"); err != nil {
		t.Errorf("removing the link's directory removed its target: %v", err)
	}
}
