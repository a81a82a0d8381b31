package main

import (
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"

	"github.com/baton-run/baton/auth"
	"github.com/baton-run/baton/budget"
)

// authConfig is what the flags say about who may connect.
type authConfig struct {
	tokens     string // --auth-tokens: SUBJECT=TOKEN,… or @FILE
	jwtSecret  string // --jwt-secret
	secretFile string // --jwt-secret-file
}

// authFlags declares the authentication and budget flags on fs.
func authFlags(fs *flag.FlagSet, a *authConfig, b *budget.Limits) {
	fs.StringVar(&a.tokens, "auth-tokens", "", "static bearer tokens: SUBJECT=TOKEN,… or @FILE with one SUBJECT=TOKEN a line; a handshake without a valid one is refused with 401")
	fs.StringVar(&a.jwtSecret, "jwt-secret", "", "HS256 secret (32 bytes or more) of the JWTs clients present (sub is the subject, exp is enforced); prefer --jwt-secret-file or BATON_JWT_SECRET, which stay out of process listings")
	fs.StringVar(&a.secretFile, "jwt-secret-file", "", "file holding the HS256 secret of --jwt-secret (one trailing newline is ignored)")
	fs.IntVar(&b.RunsPerMinute, "budget-runs-per-minute", 0, "most runs one subject may start a minute on this server (0: unlimited)")
	fs.Int64Var(&b.TokensPerDay, "budget-tokens-per-day", 0, "most model tokens one subject may use a UTC day on this server (0: unlimited)")
}

// checkAuth builds the authenticator the flags ask for, if any, and
// checks the budget's limits.
func (c *config) checkAuth() error {
	a := c.auth
	secretFrom := "jwt-secret"
	if a.secretFile != "" {
		if a.jwtSecret != "" {
			return fmt.Errorf("%s and %s are both set: give the secret once", c.src("jwt-secret"), c.src("jwt-secret-file"))
		}
		b, err := os.ReadFile(a.secretFile)
		if err != nil { // names the file, never its content
			return fmt.Errorf("%s: read the secret file: %w", c.src("jwt-secret-file"), err)
		}
		s := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
		if s == "" {
			return fmt.Errorf("%s: the secret file %s is empty", c.src("jwt-secret-file"), a.secretFile)
		}
		a.jwtSecret, c.auth.jwtSecret, secretFrom = s, s, "jwt-secret-file"
	}
	switch {
	case a.tokens != "" && a.jwtSecret != "":
		return fmt.Errorf("%s and %s are both set: choose static tokens or JWTs", c.src("auth-tokens"), c.src(secretFrom))
	case a.tokens != "":
		pairs, err := auth.LoadPairs(a.tokens)
		if err != nil {
			return fmt.Errorf("%s: %w", c.src("auth-tokens"), err)
		}
		v, err := auth.NewStatic(pairs)
		if err != nil {
			return fmt.Errorf("%s: %w", c.src("auth-tokens"), err)
		}
		c.opts.Authenticate = auth.Authenticator(v)
	case a.jwtSecret != "":
		v, err := auth.NewJWT([]byte(a.jwtSecret), nil)
		if err != nil {
			return fmt.Errorf("%s: %w", c.src(secretFrom), err)
		}
		c.opts.Authenticate = auth.Authenticator(v)
	}
	if n := c.opts.Budget.RunsPerMinute; n < 0 {
		return fmt.Errorf("%s: must not be negative (got %d; 0 is unlimited)", c.src("budget-runs-per-minute"), n)
	}
	if n := c.opts.Budget.TokensPerDay; n < 0 {
		return fmt.Errorf("%s: must not be negative (got %d; 0 is unlimited)", c.src("budget-tokens-per-day"), n)
	}
	return nil
}

// logAuth says how connections are authenticated, and warns when Baton
// listens beyond this machine with no authentication: whoever reaches the
// port can start runs, and with a real model spend its key. The Origin
// check does not stop them.
func logAuth(log *slog.Logger, addr net.Addr, c config) {
	switch {
	case c.auth.tokens != "":
		log.Info("authentication on: static bearer tokens", "budget_runs_per_minute", c.opts.Budget.RunsPerMinute,
			"budget_tokens_per_day", c.opts.Budget.TokensPerDay)
		return
	case c.auth.jwtSecret != "":
		log.Info("authentication on: HS256 JWTs", "budget_runs_per_minute", c.opts.Budget.RunsPerMinute,
			"budget_tokens_per_day", c.opts.Budget.TokensPerDay)
		return
	}
	tcp, ok := addr.(*net.TCPAddr)
	if !ok || tcp.IP.IsLoopback() {
		return
	}
	log.Warn("no authentication and listening beyond this machine: anyone who reaches the port can start runs; "+
		"keep it on a trusted network, listen on 127.0.0.1, or set --auth-tokens or --jwt-secret", "addr", addr.String())
	if c.model == "openai" {
		log.Warn("with --model openai and no authentication, anyone who reaches the port spends the model key", "addr", addr.String())
	}
}
