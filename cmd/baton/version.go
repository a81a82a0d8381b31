package main

import (
	"fmt"
	"regexp"
	"runtime"
	"runtime/debug"
	"strings"
)

// version is Baton's version when the build sets it:
//
//	go build -ldflags "-X main.version=0.2.0" ./cmd/baton
//
// Left empty, it comes from the build info (buildVersion).
var version string

// devVersion is the version of a build that says nothing better: built
// from a tree at or after the last release in CHANGELOG.md. "+dev" is
// semver build metadata, so it does not sort before the release the way
// a "-dev" pre-release would.
const devVersion = "0.1.0+dev"

// buildInfo is what `baton --version` and /healthz say of the binary.
type buildInfo struct {
	Version  string // without a leading "v": 0.1.0
	Go       string // the toolchain: go1.26.8
	Commit   string // the VCS revision, shortened to 7; "" when unknown
	Modified bool   // the tree had uncommitted changes
}

// String is the --version line: "baton 0.1.0 (go1.26.8, commit abc1234, modified)".
func (b buildInfo) String() string {
	parts := []string{b.Go}
	if b.Commit != "" {
		parts = append(parts, "commit "+b.Commit)
	}
	if b.Modified {
		parts = append(parts, "modified")
	}
	return fmt.Sprintf("baton %s (%s)", b.Version, strings.Join(parts, ", "))
}

// currentBuild is this binary's buildInfo.
func currentBuild() buildInfo {
	info, _ := debug.ReadBuildInfo()
	return resolveBuild(version, info)
}

// pseudoVersion matches the end of a Go pseudo-version
// (v0.0.0-20261125063802-624bd8d1a2b3, with +dirty when modified): what
// go build stamps on a tree with no release tag. Its commit is in the VCS
// settings anyway, so it says nothing devVersion and the commit do not.
var pseudoVersion = regexp.MustCompile(`\d{14}-[0-9a-f]{12}(\+dirty)?$`)

// resolveBuild says which version a binary is, from the first of: set (the
// -ldflags value), the main module's version in info (a release that `go
// install …@v0.1.0` stamps; not "(devel)" nor a pseudo-version), else
// devVersion. The commit and modified come from info's VCS settings, which
// go build records from a Git checkout unless -buildvcs=false. info may be
// nil (a binary built without module support).
func resolveBuild(set string, info *debug.BuildInfo) buildInfo {
	b := buildInfo{Version: set, Go: runtime.Version()}
	if info != nil {
		if info.GoVersion != "" {
			b.Go = info.GoVersion
		}
		if v := info.Main.Version; b.Version == "" && v != "" && v != "(devel)" && !pseudoVersion.MatchString(v) {
			b.Version = v
		}
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				b.Commit = s.Value[:min(7, len(s.Value))]
			case "vcs.modified":
				b.Modified = s.Value == "true"
			}
		}
	}
	if b.Version == "" {
		b.Version = devVersion
	}
	b.Version = strings.TrimPrefix(b.Version, "v")
	return b
}
