package main

import (
	"context"
	"io"
	"slices"
	"strings"
	"testing"
)

// TestUnknownEnv: a BATON_* variable that names no setting is found, with
// the setting it most likely meant when one is a typo away; every other
// variable is left alone.
func TestUnknownEnv(t *testing.T) {
	t.Parallel()
	c, err := parseConfig(nil, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	known := c.envNames
	for _, name := range []string{"BATON_SESSION_TTL", "BATON_REDIS_URL", "BATON_MCP", "BATON_JWT_SECRET", "BATON_LOG_FORMAT"} {
		if !slices.Contains(known, name) {
			t.Fatalf("the known names lack %s: %q", name, known)
		}
	}
	if slices.Contains(known, "BATON_VERSION") {
		t.Errorf("BATON_VERSION is known, but --version is not read from the environment")
	}
	tests := []struct {
		name  string
		names []string
		want  []unknownVar
	}{
		{name: "nothing of Baton's", names: []string{"PATH", "HOME", "OPENAI_API_KEY", "BATONS", "MY_BATON_SESSION_TTL"}},
		{name: "known settings", names: []string{"BATON_SESSION_TTL", "BATON_STORE", "BATON_REDIS_URL"}},
		{name: "a letter missing", names: []string{"BATON_SESION_TTL"},
			want: []unknownVar{{"BATON_SESION_TTL", "BATON_SESSION_TTL"}}},
		{name: "an underscore missing", names: []string{"BATON_LOGLEVEL"},
			want: []unknownVar{{"BATON_LOGLEVEL", "BATON_LOG_LEVEL"}}},
		{name: "two letters swapped", names: []string{"BATON_STROE"},
			want: []unknownVar{{"BATON_STROE", "BATON_STORE"}}},
		{name: "lower case", names: []string{"baton_store"},
			want: []unknownVar{{"baton_store", "BATON_STORE"}}},
		{name: "nothing close", names: []string{"BATON_COLOUR_SCHEME"},
			want: []unknownVar{{"BATON_COLOUR_SCHEME", ""}}},
		{name: "not a setting of the server", names: []string{"BATON_VERSION"},
			want: []unknownVar{{"BATON_VERSION", ""}}},
		{name: "several, sorted, among known ones", names: []string{"BATON_STORE", "BATON_SESION_TTL", "PATH", "BATON_BUFER_SIZE"},
			want: []unknownVar{{"BATON_BUFER_SIZE", "BATON_BUFFER_SIZE"}, {"BATON_SESION_TTL", "BATON_SESSION_TTL"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := unknownEnv(tt.names, known); !slices.Equal(got, tt.want) {
				t.Errorf("unknownEnv(%q) = %+v, want %+v", tt.names, got, tt.want)
			}
		})
	}
}

// TestUnknownEnvironmentWarned: a server started with a misspelt BATON_*
// variable in its environment starts, and says so once in its log, naming
// the variable and the setting meant; the value is not logged (it may be
// a secret).
func TestUnknownEnvironmentWarned(t *testing.T) {
	t.Parallel()
	logs := &logSink{}
	environ := []string{"PATH=/usr/bin", "BATON_SESION_TTL=10m", "BATON_JWT_SECRT=hunter2", "BATON_LOG_LEVEL=info"}
	ctx, cancel := context.WithCancel(withEnviron(context.Background(), environ))
	done := make(chan error, 1)
	startServerCtx(t, ctx, done, logs)
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run returned %v", err)
		}
	})
	const msg = "ignoring an environment variable that names no setting (baton --help lists them)"
	var warned []string
	for _, r := range logs.records(t) {
		if r["msg"] == msg {
			if r["level"] != "WARN" {
				t.Errorf("logged at %v, want WARN", r["level"])
			}
			warned = append(warned, r["variable"].(string)+"→"+r["did_you_mean"].(string))
		}
	}
	if want := []string{"BATON_JWT_SECRT→BATON_JWT_SECRET", "BATON_SESION_TTL→BATON_SESSION_TTL"}; !slices.Equal(warned, want) {
		t.Errorf("warned of %q, want %q", warned, want)
	}
	if strings.Contains(logs.String(), "hunter2") {
		t.Errorf("a variable's value reached the log")
	}
}
