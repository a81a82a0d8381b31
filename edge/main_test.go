package edge

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain runs the file-limit helper when the test binary is started as
// one (files_test.go), else the tests, failing the package on a leaked
// goroutine: every Listener's refusers must be gone once it is closed.
func TestMain(m *testing.M) {
	if os.Getenv(filesHelperEnv) != "" {
		os.Exit(filesHelper())
	}
	goleak.VerifyTestMain(m)
}
