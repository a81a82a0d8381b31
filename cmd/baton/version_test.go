package main

import (
	"context"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

// versionLine is the form of `baton --version`.
var versionLine = regexp.MustCompile(`^baton [0-9]+\.[0-9]+\.[0-9]+\S* \(go[0-9.]+\S*(, commit [0-9a-f]{7})?(, modified)?\)\n$`)

// TestVersionFlag: --version prints one line to stdout and returns nil,
// whatever else the settings say; it is not read from the environment.
func TestVersionFlag(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		env  map[string]string
	}{
		{name: "alone", args: []string{"--version"}},
		{name: "single dash", args: []string{"-version"}},
		{name: "beside other flags", args: []string{"--addr", "127.0.0.1:0", "--version"}},
		{name: "with a bad setting in the environment", args: []string{"--version"}, env: map[string]string{"BATON_SESSION_TTL": "10"}},
		{name: "with settings that do not go together", args: []string{"--store", "redis", "--version"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr strings.Builder
			if err := run(context.Background(), tt.args, func(k string) string { return tt.env[k] }, &stdout, &stderr); err != nil {
				t.Fatalf("run: %v", err)
			}
			if !versionLine.MatchString(stdout.String()) {
				t.Errorf("stdout %q, want a line like %q", stdout.String(), "baton 0.1.0 (go1.26.8, commit abc1234, modified)\n")
			}
			if got := strings.TrimSpace(stdout.String()); got != currentBuild().String() {
				t.Errorf("stdout %q, want %q", got, currentBuild())
			}
			if stderr.Len() > 0 {
				t.Errorf("stderr %q, want nothing", stderr.String())
			}
		})
	}

	// BATON_VERSION is no setting: the server starts (and warns of it,
	// TestUnknownEnvironmentWarned).
	c, err := parseConfig(nil, func(k string) string { return map[string]string{"BATON_VERSION": "true"}[k] }, &strings.Builder{})
	if err != nil || c.showVersion {
		t.Errorf("with BATON_VERSION=true: %v, --version %v; want no error and no --version", err, c.showVersion)
	}
}

// TestVersionSetAtBuild: the binary says the version -ldflags "-X
// main.version=…" gives it, and the toolchain that built it.
func TestVersionSetAtBuild(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "baton")
	out, err := exec.Command("go", "build", "-ldflags", "-X main.version=9.8.7-rc.1", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err = exec.Command(bin, "--version").Output()
	if err != nil {
		t.Fatalf("baton --version: %v", err)
	}
	if want := "baton 9.8.7-rc.1 (" + runtime.Version(); !strings.HasPrefix(string(out), want) || !versionLine.Match(out) {
		t.Errorf("baton --version printed %q, want a line beginning %q", out, want)
	}
}

// TestResolveBuild: the version comes from -ldflags, else from a release
// version of the main module, else it is devVersion; the commit and
// whether the tree was modified come from the VCS settings.
func TestResolveBuild(t *testing.T) {
	t.Parallel()
	vcs := func(rev, modified string) []debug.BuildSetting {
		return []debug.BuildSetting{{Key: "-compiler", Value: "gc"}, {Key: "vcs", Value: "git"},
			{Key: "vcs.revision", Value: rev}, {Key: "vcs.time", Value: "2026-11-25T06:38:02Z"}, {Key: "vcs.modified", Value: modified}}
	}
	const rev = "624bd8d1a2b3c4d5e6f708192a3b4c5d6e7f8091"
	tests := []struct {
		name string
		set  string // -X main.version
		info *debug.BuildInfo
		want buildInfo
	}{
		{name: "no build info", want: buildInfo{Version: devVersion, Go: runtime.Version()}},
		{name: "go build with -buildvcs=false",
			info: &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/baton-run/baton", Version: "(devel)"}},
			want: buildInfo{Version: devVersion, Go: "go1.26.8"}},
		{name: "go build in a clean checkout without a tag",
			info: &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.0.0-20261125063802-624bd8d1a2b3"}, Settings: vcs(rev, "false")},
			want: buildInfo{Version: devVersion, Go: "go1.26.8", Commit: "624bd8d"}},
		{name: "go build in a modified checkout",
			info: &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.0.0-20261125063802-624bd8d1a2b3+dirty"}, Settings: vcs(rev, "true")},
			want: buildInfo{Version: devVersion, Go: "go1.26.8", Commit: "624bd8d", Modified: true}},
		{name: "go install of a release",
			info: &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.1.0"}},
			want: buildInfo{Version: "0.1.0", Go: "go1.26.8"}},
		{name: "go build at a release tag",
			info: &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.1.0"}, Settings: vcs(rev, "false")},
			want: buildInfo{Version: "0.1.0", Go: "go1.26.8", Commit: "624bd8d"}},
		{name: "-ldflags wins over the module's version", set: "0.2.0-rc.1",
			info: &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.1.0"}, Settings: vcs(rev, "true")},
			want: buildInfo{Version: "0.2.0-rc.1", Go: "go1.26.8", Commit: "624bd8d", Modified: true}},
		{name: "-ldflags with a leading v", set: "v0.2.0",
			info: &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}},
			want: buildInfo{Version: "0.2.0", Go: "go1.26.8"}},
		{name: "a short revision", info: &debug.BuildInfo{GoVersion: "go1.26.8", Settings: vcs("abc", "false")},
			want: buildInfo{Version: devVersion, Go: "go1.26.8", Commit: "abc"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := resolveBuild(tt.set, tt.info); got != tt.want {
				t.Errorf("resolveBuild: %+v, want %+v", got, tt.want)
			}
		})
	}
}

// TestVersionString: the --version line says what is known, no more.
func TestVersionString(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		b    buildInfo
		want string
	}{
		{"everything", buildInfo{Version: "0.1.0", Go: "go1.26.8", Commit: "abc1234", Modified: true}, "baton 0.1.0 (go1.26.8, commit abc1234, modified)"},
		{"clean", buildInfo{Version: "0.1.0", Go: "go1.26.8", Commit: "abc1234"}, "baton 0.1.0 (go1.26.8, commit abc1234)"},
		{"no commit", buildInfo{Version: devVersion, Go: "go1.26.8"}, "baton " + devVersion + " (go1.26.8)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.b.String(); got != tt.want {
				t.Errorf("%q, want %q", got, tt.want)
			}
		})
	}
}

// TestHealthzVersion: /healthz says which version serves.
func TestHealthzVersion(t *testing.T) {
	t.Parallel()
	base := startServer(t)
	if got, want := healthz(t, base).Version, currentBuild().Version; got != want || got == "" {
		t.Errorf("/healthz version %q, want %q", got, want)
	}
}
