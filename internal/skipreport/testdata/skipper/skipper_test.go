// Package skipper is a package whose tests skip, for skipreport's test of
// the report's way out of go test (go test ./... does not see it: it is
// under testdata).
package skipper

import (
	"os"
	"testing"

	"github.com/baton-run/baton/internal/skipreport"
)

func TestMain(m *testing.M) { os.Exit(skipreport.Reporting(m).Run()) }

func TestSkipsOne(t *testing.T) { skipreport.Skip(t, "the skipper's program is missing") }

func TestSkipsTwo(t *testing.T) {
	t.Run("sub", func(t *testing.T) { skipreport.Skip(t, "the skipper's program is missing") })
}

func TestPasses(t *testing.T) {}
