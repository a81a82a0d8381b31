// Package failure says what went wrong when a model ran and what to do about
// it: the error types of the contract (validation, timeout, network,
// rate_limit, internal, permanent), the one classification of any error into
// (error_type, recoverable, suggested_action), and the retry policy —
// exponential backoff with jitter and a cap, from github.com/cenkalti/backoff/v4.
//
// Models (simulated or real) return *Error to say what kind of failure they
// hit; everything else is classified from the error itself. The package
// knows nothing of events, sessions or connections.
package failure

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"
)

// Error types of error.execution (§5.4).
const (
	Validation = "validation"
	Timeout    = "timeout"
	Network    = "network"
	RateLimit  = "rate_limit"
	Internal   = "internal"
	Permanent  = "permanent"
)

// Suggested actions of error.execution.
const (
	ActionRetry = "retry"
	ActionAbort = "abort"
)

// Error is a failure whose type the model knows.
type Error struct {
	Type string // one of the constants above
	// RetryAfter is how long the model asked to wait (rate_limit), 0 when
	// it did not say.
	RetryAfter time.Duration
	Err        error
}

func (e *Error) Error() string {
	if e.Err == nil {
		return e.Type
	}
	return fmt.Sprintf("%s: %v", e.Type, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// New returns an *Error of the given type with a message.
func New(typ, format string, args ...any) *Error {
	return &Error{Type: typ, Err: fmt.Errorf(format, args...)}
}

// Class is how the pipeline treats an error.
type Class struct {
	Type            string
	Recoverable     bool
	SuggestedAction string
	RetryAfter      time.Duration
}

// Classify maps any error to its class: an *Error anywhere in the chain
// gives its type; a deadline is a timeout; a net.Error is a timeout or a
// network error; anything else is internal. Only permanent errors are not
// recoverable.
func Classify(err error) Class {
	c := Class{Type: Internal}
	var fe *Error
	var ne net.Error
	switch {
	case errors.As(err, &fe):
		c.Type, c.RetryAfter = fe.Type, fe.RetryAfter
		if !known(c.Type) {
			c.Type = Internal
		}
	case errors.Is(err, context.DeadlineExceeded):
		c.Type = Timeout
	case errors.As(err, &ne):
		c.Type = Network
		if ne.Timeout() {
			c.Type = Timeout
		}
	}
	c.Recoverable = c.Type != Permanent
	c.SuggestedAction = ActionAbort
	if c.Recoverable {
		c.SuggestedAction = ActionRetry
	}
	return c
}

func known(t string) bool {
	switch t {
	case Validation, Timeout, Network, RateLimit, Internal, Permanent:
		return true
	}
	return false
}
