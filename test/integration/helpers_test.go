package integration

import (
	"encoding/json"
	"flag"
	"os"
	"testing"
)

func jsonUnmarshal(s string, v any) error { return json.Unmarshal([]byte(s), v) }

func TestMain(m *testing.M) {
	// The apiserver logs a great deal at its default verbosity.
	_ = flag.Set("v", "0")
	flag.Parse()
	os.Exit(m.Run())
}
