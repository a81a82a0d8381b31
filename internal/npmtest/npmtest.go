// Package npmtest installs the npm packages the tests run — real MCP
// servers, TypeScript's tsc, and AG-UI's @ag-ui/client and @ag-ui/core —
// pinned in npm/package-lock.json beside
// this file, once per lock, into npm/node_modules (ignored by git).
// .ci/run installs them the same way before the tests; a test on a fresh
// machine installs them itself.
package npmtest

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"github.com/baton-run/baton/internal/skipreport"
)

var npmInstall struct {
	once    sync.Once
	modules string
	err     error
}

// Modules returns the node_modules directory holding the test servers,
// installing them first if needed. Without node and npm the test fails
// when CI is set and is skipped otherwise, counted in the package's skip
// report: its TestMain must wrap its M with skipreport.Reporting.
func Modules(t testing.TB) string {
	t.Helper()
	for _, bin := range []string{"node", "npm"} {
		if _, err := exec.LookPath(bin); err != nil {
			skipreport.Skip(t, bin+" not found: install Node ≥ 20 and npm (Debian's nodejs and npm) to run the tests of real MCP servers")
		}
	}
	npmInstall.once.Do(func() { npmInstall.modules, npmInstall.err = installNPM() })
	if npmInstall.err != nil {
		t.Fatal(npmInstall.err)
	}
	return npmInstall.modules
}

// installNPM runs npm ci for testdata/npm unless node_modules already holds
// what package-lock.json pins (a stamp file records the lock's hash). It
// installs into a temporary directory and renames it into place, so that
// concurrent test runs never see a half-installed node_modules.
func installNPM() (string, error) {
	_, self, _, ok := runtime.Caller(0)
	if !ok {
		return "", fmt.Errorf("npmtest: cannot locate npm/")
	}
	base := filepath.Join(filepath.Dir(self), "npm")
	lock, err := os.ReadFile(filepath.Join(base, "package-lock.json"))
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(lock)
	want := hex.EncodeToString(sum[:])
	modules := filepath.Join(base, "node_modules")
	installed := func() bool {
		got, err := os.ReadFile(filepath.Join(modules, ".baton-lock-sha256"))
		return err == nil && string(got) == want
	}
	if installed() {
		return modules, nil
	}

	tmp, err := os.MkdirTemp(base, "node_modules.tmp-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	for _, name := range []string{"package.json", "package-lock.json"} {
		b, err := os.ReadFile(filepath.Join(base, name))
		if err != nil {
			return "", err
		}
		if err := os.WriteFile(filepath.Join(tmp, name), b, 0o644); err != nil {
			return "", err
		}
	}
	cmd := exec.Command("npm", "ci", "--prefix", tmp, "--no-audit", "--no-fund")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("npm ci in %s: %v\n%s", base, err, out)
	}
	if err := os.WriteFile(filepath.Join(tmp, "node_modules", ".baton-lock-sha256"), []byte(want), 0o644); err != nil {
		return "", err
	}
	if _, err := os.Stat(modules); err == nil {
		// Outdated: move it aside rather than delete it under a run that
		// may still use it.
		old, err := os.MkdirTemp(base, "node_modules.old-")
		if err != nil {
			return "", err
		}
		defer os.RemoveAll(old)
		_ = os.Rename(modules, filepath.Join(old, "node_modules"))
	}
	if err := os.Rename(filepath.Join(tmp, "node_modules"), modules); err != nil && !installed() {
		return "", fmt.Errorf("install %s: %w", modules, err)
	}
	return modules, nil
}
