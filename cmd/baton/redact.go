package main

import (
	"encoding/json"
	"expvar"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
)

// redacted replaces a secret wherever Baton shows its command line.
const redacted = "REDACTED"

// secretFlags are the flags whose values hold secrets, with how each is
// shown: the JWT secret not at all, static tokens unless they are an
// @FILE, URLs without their password.
var secretFlags = map[string]func(string) string{
	"jwt-secret":      func(string) string { return redacted },
	"state-key":       func(string) string { return redacted },
	"auth-tokens":     redactTokens,
	"redis-url":       redactURL,
	"openai-base-url": redactURL,
}

func redactTokens(v string) string {
	if strings.HasPrefix(v, "@") {
		return v // a file's name; the tokens are in it
	}
	return redacted
}

// redactURL is u with its password replaced, in its user part and in a
// password parameter (a Sentinel URL's master password); a value that
// does not parse as a URL is replaced whole, since it may still hold one.
func redactURL(v string) string {
	u, err := url.Parse(v)
	if err != nil {
		return redacted
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), redacted)
	}
	if q := u.Query(); q.Has("password") {
		q.Set("password", redacted)
		u.RawQuery = q.Encode()
	}
	return u.String()
}

// redactArgs is a command line (program name first) with the values of
// secretFlags redacted, in either form the flag package reads: -name value
// and -name=value, with one dash or two. It errs towards hiding: an
// argument that looks like a secret flag is taken for one wherever it is.
func redactArgs(args []string) []string {
	out := make([]string, len(args))
	copy(out, args)
	for i := 1; i < len(out); i++ {
		a := out[i]
		if !strings.HasPrefix(a, "-") {
			continue
		}
		name, value, inline := strings.Cut(strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-"), "=")
		redact, ok := secretFlags[name]
		switch {
		case !ok:
		case inline:
			out[i] = a[:len(a)-len(value)] + redact(value)
		case i+1 < len(out):
			out[i+1] = redact(out[i+1])
			i++
		}
	}
	return out
}

// cmdline serves /debug/pprof/cmdline as net/http/pprof does, with the
// secrets redacted.
func cmdline(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprint(w, strings.Join(redactArgs(os.Args), "\x00"))
}

// vars serves /debug/vars as expvar does, but with its "cmdline" var (the
// process's os.Args, published by expvar itself) redacted.
func vars(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	fmt.Fprint(w, "{\n")
	first := true
	expvar.Do(func(kv expvar.KeyValue) {
		if !first {
			fmt.Fprint(w, ",\n")
		}
		first = false
		v := kv.Value.String()
		if kv.Key == "cmdline" {
			b, _ := json.Marshal(redactArgs(os.Args))
			v = string(b)
		}
		fmt.Fprintf(w, "%q: %s", kv.Key, v)
	})
	fmt.Fprint(w, "\n}\n")
}
