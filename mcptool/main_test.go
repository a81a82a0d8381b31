package mcptool

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/baton-run/baton/internal/skipreport"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(skipreport.Reporting(m))
}
