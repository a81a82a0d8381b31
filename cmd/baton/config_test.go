package main

import (
	"context"
	"slices"
	"strings"
	"testing"
)

// TestFlags: a bad setting is one line naming the flag or variable it came
// from and the form expected; the usage is printed only for an unknown flag.
func TestFlags(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		args      []string
		env       map[string]string
		want      string // the whole error
		wantUsage bool
	}{
		{name: "unknown flag", args: []string{"--nope"},
			want: "configure: unknown flag --nope (the flags are listed above)", wantUsage: true},
		{name: "stray argument", args: []string{"serve"},
			want: `configure: unexpected arguments: ["serve"] (every setting is a --flag)`},
		{name: "bad duration", args: []string{"--session-ttl", "10"},
			want: `configure: --session-ttl: "10" is not a duration (use 30s, 5m)`},
		{name: "bad duration from the environment", env: map[string]string{"BATON_SESSION_TTL": "10"},
			want: `configure: BATON_SESSION_TTL: "10" is not a duration (use 30s, 5m)`},
		{name: "bad number", args: []string{"--max-parallel", "four"},
			want: `configure: --max-parallel: "four" is not a whole number`},
		{name: "bad number from the environment", env: map[string]string{"BATON_READ_LIMIT": "64k"},
			want: `configure: BATON_READ_LIMIT: "64k" is not a whole number`},
		{name: "zero buffer", args: []string{"--buffer-size", "0"},
			want: "configure: --buffer-size: must be at least 1 (got 0)"},
		{name: "zero from the environment", env: map[string]string{"BATON_MAX_TASKS": "0"},
			want: "configure: BATON_MAX_TASKS: must be at least 1 (got 0)"},
		{name: "a flag overriding the environment is the one named", args: []string{"--max-retries", "-1"}, env: map[string]string{"BATON_MAX_RETRIES": "0"},
			want: "configure: --max-retries: must be at least 1 (got -1)"},
		{name: "the old name of --max-retries is the one named", env: map[string]string{"BATON_MAX_ATTEMPTS": "0"},
			want: "configure: BATON_MAX_ATTEMPTS: must be at least 1 (got 0)"},
		{name: "the old name as a flag beats the new one in the environment", args: []string{"--max-attempts", "0"}, env: map[string]string{"BATON_MAX_RETRIES": "2"},
			want: "configure: --max-attempts: must be at least 1 (got 0)"},
		{name: "both names of --max-retries", args: []string{"--max-retries", "2", "--max-attempts", "3"},
			want: "configure: --max-attempts and --max-retries: --max-attempts is the old name of --max-retries; set one"},
		{name: "zero duration", args: []string{"--pong-timeout", "0s"},
			want: "configure: --pong-timeout: must be more than 0 (got 0s; use 30s, 5m)"},
		{name: "negative sim delay", env: map[string]string{"BATON_SIM_DELAY": "-1s"},
			want: "configure: BATON_SIM_DELAY: must not be negative (got -1s; use 0, 20ms, 1s)"},
		{name: "bad log format", args: []string{"--log-format", "xml"},
			want: `configure: --log-format: "xml" is not a log format (use text or json)`},
		{name: "bad log level from the environment", env: map[string]string{"BATON_LOG_LEVEL": "loud"},
			want: `configure: BATON_LOG_LEVEL: "loud" is not a log level (use debug, info, warn or error)`},
		{name: "negative limit", args: []string{"--max-sessions", "-1"},
			want: "configure: --max-sessions: must not be negative (got -1; 0 turns the limit off)"},
		{name: "frame cap too small", env: map[string]string{"BATON_MAX_FRAME_BYTES": "1000"},
			want: "configure: BATON_MAX_FRAME_BYTES: must be 0 (no cap) or at least 4096 (got 1000)"},
		{name: "myagent path not a path", args: []string{"--myagent-path", "myagent"},
			want: `configure: --myagent-path: "myagent" is not a path such as /myagent`},
		{name: "myagent path taken", env: map[string]string{"BATON_MYAGENT_PATH": "/ws"},
			want: "configure: BATON_MYAGENT_PATH: /ws is Baton's own; choose another path"},
		{name: "myagent path under AG-UI's", args: []string{"--myagent-path", "/agui/x"},
			want: "configure: --myagent-path: /agui/x is Baton's own; choose another path"},
		{name: "short state key", env: map[string]string{"BATON_STATE_KEY": "short"},
			want: "configure: BATON_STATE_KEY: must be at least 16 bytes (got 5)"},
		{name: "unknown model", args: []string{"--model", "gpt"},
			want: `configure: --model: "gpt" is not a model (use sim or openai)`},
		{name: "openai without a key", args: []string{"--model", "openai"},
			want: "configure: openai: OPENAI_API_KEY is required for api.openai.com (a local server set with --openai-base-url needs none)"},
		{name: "base URL without a scheme", args: []string{"--model", "openai"}, env: map[string]string{"OPENAI_BASE_URL": "localhost:11434"},
			want: `configure: OPENAI_BASE_URL: "localhost:11434" is not an http(s) URL (e.g. http://localhost:11434/v1)`},
		{name: "origin pattern with a scheme", args: []string{"--allowed-origins", "a.example, https://app.example"},
			want: `configure: --allowed-origins: pattern "https://app.example" has a scheme; a pattern is a host with its port when the page has one, e.g. app.example.com, localhost:3000, *.example.com`},
		{name: "origin pattern with a path", env: map[string]string{"BATON_ALLOWED_ORIGINS": "app.example/ws"},
			want: `configure: BATON_ALLOWED_ORIGINS: pattern "app.example/ws" has a path; a pattern is a host with its port when the page has one, e.g. app.example.com, localhost:3000, *.example.com`},
		{name: "empty origin pattern", args: []string{"--allowed-origins", "a.example,"},
			want: `configure: --allowed-origins: entry 2 of "a.example," is empty (a stray comma?)`},
		{name: "origin patterns separated by spaces", args: []string{"--allowed-origins", "a.example b.example"},
			want: `configure: --allowed-origins: pattern "a.example b.example" contains a space; separate patterns with commas`},
		{name: "zero body timeout", args: []string{"--body-timeout", "0s"},
			want: "configure: --body-timeout: must be more than 0 (got 0s; use 30s, 5m)"},
		{name: "zero idle timeout from the environment", env: map[string]string{"BATON_IDLE_TIMEOUT": "0s"},
			want: "configure: BATON_IDLE_TIMEOUT: must be more than 0 (got 0s; use 30s, 5m)"},
		{name: "host pattern with a scheme", env: map[string]string{"BATON_ALLOWED_HOSTS": "http://baton.example.com"},
			want: `configure: BATON_ALLOWED_HOSTS: pattern "http://baton.example.com" has a scheme; a pattern is a host name, with a port or without (then any port), e.g. baton.example.com, *.corp.example, baton.example.com:8443`},
		{name: "negative connections per address", args: []string{"--max-conns-per-ip", "-1"},
			want: "configure: --max-conns-per-ip: must not be negative (got -1; 0 turns the limit off)"},
		{name: "bad origin pattern syntax", args: []string{"--allowed-origins", "[a-.example"},
			want: `configure: --allowed-origins: pattern "[a-.example" is not valid path.Match syntax (*, ?, [a-z], \ escapes): syntax error in pattern`},
		{name: "unknown default mode", args: []string{"--default-mode", "Chat"},
			want: `configure: --default-mode: "Chat" is not a mode (use plan or chat)`},
		{name: "unknown default mode from the environment", env: map[string]string{"BATON_DEFAULT_MODE": "auto"},
			want: `configure: BATON_DEFAULT_MODE: "auto" is not a mode (use plan or chat)`},
		{name: "unknown store", args: []string{"--store", "etcd"},
			want: `configure: --store: "etcd" is not a store (use memory or redis)`},
		{name: "redis store without a URL", env: map[string]string{"BATON_STORE": "redis"},
			want: `configure: BATON_STORE redis needs a Redis to use: set --redis-url or BATON_REDIS_URL (e.g. redis://127.0.0.1:6379/0)`},
		{name: "redis URL with the memory store", env: map[string]string{"BATON_REDIS_URL": "redis://127.0.0.1:6379"},
			want: `configure: BATON_REDIS_URL is set but the store is memory: add --store redis to keep sessions in Redis`},
		{name: "redis URL with an unknown option", args: []string{"--store", "redis", "--redis-url", "redis://:hunter2@127.0.0.1:6379/0?nope=1"},
			want: "configure: --redis-url: redis: unexpected option: nope (want " + redisURLForms + ")"},
		{name: "sentinel URL with an empty master name", env: map[string]string{"BATON_STORE": "redis", "BATON_REDIS_URL": "redis://127.0.0.1:26379?master_name="},
			want: "configure: BATON_REDIS_URL: master_name is empty: name the master the sentinels monitor (want " + redisURLForms + ")"},
		{name: "sentinel URL with a bad sentinel address", args: []string{"--store", "redis", "--redis-url", "redis://127.0.0.1:26379?master_name=m&addr=nohost"},
			want: "configure: --redis-url: redis: unable to parse addr param: nohost (want " + redisURLForms + ")"},
		{name: "redis URL that is no URL", args: []string{"--store", "redis", "--redis-url", "redis://:hunter2@[::1/0"},
			want: "configure: --redis-url: not a URL: missing ']' in host (want " + redisURLForms + ")"},
		{name: "negative replica count", args: []string{"--store", "redis", "--redis-url", "redis://127.0.0.1:6379/0", "--redis-replicas", "-1"},
			want: "configure: --redis-replicas: must not be negative (got -1; 0 turns the limit off)"},
		{name: "unusable address", args: []string{"--addr", "nowhere"},
			want: `listen on --addr "nowhere": listen tcp: address nowhere: missing port in address`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stderr strings.Builder
			args := append([]string{"--addr", "127.0.0.1:0"}, tt.args...)
			err := run(context.Background(), args, func(k string) string { return tt.env[k] }, &strings.Builder{}, &stderr)
			if err == nil || err.Error() != tt.want {
				t.Errorf("run: %v\nwant: %s", err, tt.want)
			}
			if usage := strings.Contains(stderr.String(), "Usage: baton"); usage != tt.wantUsage {
				t.Errorf("usage printed: %v, want %v", usage, tt.wantUsage)
			}
			if !tt.wantUsage && stderr.Len() > 0 {
				t.Errorf("stderr %q: the error is returned once, not also printed", stderr.String())
			}
		})
	}
}

func TestHelp(t *testing.T) {
	t.Parallel()
	var stdout, stderr strings.Builder
	if err := run(context.Background(), []string{"--help"}, func(string) string { return "" }, &stdout, &stderr); err != nil {
		t.Fatalf("run --help: %v", err)
	}
	for _, want := range []string{"BATON_<NAME>", "BATON_SESSION_TTL=10m", "OPENAI_API_KEY", "OPENAI_BASE_URL", "--session-ttl duration", `(default ":8080")`, "?master_name=NAME"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("--help lacks %q:\n%s", want, stderr.String())
		}
	}
}

// TestEnvironmentConfigures: BATON_* variables set flags, and a flag on the
// command line wins over them.
func TestEnvironmentConfigures(t *testing.T) {
	t.Parallel()
	c, err := parseConfig([]string{"--max-parallel", "7"}, func(k string) string {
		return map[string]string{"BATON_BUFFER_SIZE": "42", "BATON_MAX_PARALLEL": "2", "BATON_ALLOWED_ORIGINS": "a.example, localhost:*",
			"BATON_ADAPTIVE": "true"}[k]
	}, &strings.Builder{})
	if err != nil {
		t.Fatal(err)
	}
	if c.opts.BufferSize != 42 || c.opts.MaxParallel != 7 || !slices.Equal(c.opts.AllowedOrigins, []string{"a.example", "localhost:*"}) || !c.opts.Adaptive {
		t.Errorf("config %+v", c.opts)
	}
}

// TestRedisReplicas: --redis-replicas defaults to 1 on a Sentinel URL,
// whose failover would lose what the replica had not yet; on a cluster to
// every replica of the master, none needed; and to 0 on one server. Set,
// from the flag or the environment, it is what it says.
func TestRedisReplicas(t *testing.T) {
	t.Parallel()
	const (
		one      = "redis://127.0.0.1:6379/0"
		sentinel = "redis://127.0.0.1:26379/0?master_name=m"
		cluster  = "redis://127.0.0.1:7000?addr=127.0.0.1:7001&addr=127.0.0.1:7002"
	)
	for _, tt := range []struct {
		name  string
		args  []string
		env   map[string]string
		want  int
		every bool
	}{
		{name: "one server", args: []string{"--redis-url", one}, want: 0},
		{name: "sentinel", args: []string{"--redis-url", sentinel}, want: 1},
		{name: "sentinel, none asked for", args: []string{"--redis-url", sentinel, "--redis-replicas", "0"}, want: 0},
		{name: "sentinel, two from the environment", args: []string{"--redis-url", sentinel}, env: map[string]string{"BATON_REDIS_REPLICAS": "2"}, want: 2},
		{name: "one server, one asked for", args: []string{"--redis-url", one, "--redis-replicas", "1"}, want: 1},
		{name: "cluster", args: []string{"--redis-url", cluster}, want: 0, every: true},
		{name: "cluster, one asked for", args: []string{"--redis-url", cluster, "--redis-replicas", "1"}, want: 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := parseConfig(append([]string{"--store", "redis"}, tt.args...), func(k string) string { return tt.env[k] }, &strings.Builder{})
			if err != nil {
				t.Fatal(err)
			}
			rc, err := parseRedisURL(c.redisURL)
			if err != nil {
				t.Fatal(err)
			}
			if got, every := c.replicasFor(rc); got != tt.want || every != tt.every {
				t.Errorf("replicas %d (every %v), want %d (every %v)", got, every, tt.want, tt.every)
			}
		})
	}
}
