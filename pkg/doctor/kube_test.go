package doctor

import (
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestNewClientsNamesTheKubeconfig: without a kubeconfig, the error says
// where it looked, not client-go's KUBERNETES_MASTER hint.
func TestNewClientsNamesTheKubeconfig(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no-such-kubeconfig")
	t.Setenv("KUBECONFIG", missing)
	t.Setenv("HOME", t.TempDir())
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	_, err := NewClients(nil, "", time.Second)
	if err == nil || !strings.Contains(err.Error(), missing) || strings.Contains(err.Error(), "KUBERNETES_MASTER") {
		t.Errorf("err = %v, want one naming %s", err, missing)
	}
}
