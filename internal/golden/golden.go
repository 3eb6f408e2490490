// Package golden compares test output with files under testdata.
package golden

import (
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// Check compares got with the file at path; with update it first writes got
// there.
func Check(t testing.TB, path string, got []byte, update bool) {
	t.Helper()
	if update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("%s (-want,+got):\n%s", path, diff)
	}
}
