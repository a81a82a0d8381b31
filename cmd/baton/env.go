package main

import (
	"context"
	"log/slog"
	"slices"
	"strings"
)

// environKey: run's ctx carries under it the names of the process's
// environment variables ([]string), which main puts there, so that a
// BATON_* variable naming no setting is warned about at start: a typo such
// as BATON_SESION_TTL would otherwise do nothing, silently. Without it
// nothing is checked. The names come this way, not from os.Environ in run,
// so that the run of a test sees only the environment the test gives it.
type environKey struct{}

// withEnviron returns ctx carrying the names of environ's variables
// (os.Environ's NAME=value form).
func withEnviron(ctx context.Context, environ []string) context.Context {
	names := make([]string, 0, len(environ))
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		names = append(names, name)
	}
	return context.WithValue(ctx, environKey{}, names)
}

// unknownVar is a BATON_* variable that names no setting, and the setting
// it most likely meant ("" when none is close).
type unknownVar struct {
	name, closest string
}

// maxTypo is the most single-letter edits a variable may be from a known
// name for that name to be suggested.
const maxTypo = 2

// unknownEnv returns the variables of names that begin with BATON_ (in any
// case, since a lower-case baton_store is not read either) but are not in
// known, sorted, each with the known name fewest edits away when it is at
// most maxTypo edits away (compared upper case).
func unknownEnv(names, known []string) []unknownVar {
	var out []unknownVar
	for _, name := range names {
		upper := strings.ToUpper(name)
		if !strings.HasPrefix(upper, "BATON_") || slices.Contains(known, name) {
			continue
		}
		u := unknownVar{name: name}
		best := maxTypo + 1
		for _, k := range known {
			if d := editDistance(upper, k); d < best {
				best, u.closest = d, k
			}
		}
		out = append(out, u)
	}
	slices.SortFunc(out, func(a, b unknownVar) int { return strings.Compare(a.name, b.name) })
	return out
}

// warnUnknownEnv logs a warning for each variable unknownEnv finds among
// the names ctx carries (environKey).
func warnUnknownEnv(ctx context.Context, log *slog.Logger, known []string) {
	names, _ := ctx.Value(environKey{}).([]string)
	for _, u := range unknownEnv(names, known) {
		attrs := []any{"variable", u.name}
		if u.closest != "" {
			attrs = append(attrs, "did_you_mean", u.closest)
		}
		log.Warn("ignoring an environment variable that names no setting (baton --help lists them)", attrs...)
	}
}

// editDistance is the Levenshtein distance between a and b, in bytes
// (variable names are ASCII).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
