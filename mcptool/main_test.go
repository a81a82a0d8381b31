package mcptool

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/baton-run/baton/internal/mcptest"
	"github.com/baton-run/baton/internal/skipreport"
)

func TestMain(m *testing.M) {
	mcptest.Main() // the test binary started as a test MCP server
	goleak.VerifyTestMain(skipreport.Reporting(m))
}
