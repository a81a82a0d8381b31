// Package failure says what went wrong when a model ran and what to do about
// it: the error types of the contract (validation, timeout, network,
// rate_limit, internal, permanent), the one classification of any error into
// (error_type, recoverable, suggested_action), and the retry policy —
// exponential backoff with jitter and a cap, from github.com/cenkalti/backoff/v4.
//
// Models (simulated or real) return *Error to say what kind of failure they
// hit; everything else is classified from the error itself. What a client
// is told about a failure is Public(err): a message Baton wrote, never an
// upstream address, key or raw transport error, which stay in Error.Err for
// the log. The package knows nothing of events, sessions or connections.
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
	// Message is what a client may be told (see Public): written by Baton,
	// with no upstream address, key or raw transport error. Empty means
	// the type's generic message.
	Message string
	// Err is the underlying error, with every detail; it goes to the log,
	// never to a client.
	Err error
}

// Error is the detailed text, for the log: the type and Err, or Message
// when there is no Err.
func (e *Error) Error() string {
	switch {
	case e.Err != nil:
		return fmt.Sprintf("%s: %v", e.Type, e.Err)
	case e.Message != "":
		return e.Type + ": " + e.Message
	}
	return e.Type
}

func (e *Error) Unwrap() error { return e.Err }

// New returns an *Error of the given type with a message Baton writes
// itself. The message is shown to clients: args must not carry upstream
// detail (wrap such an error in Err instead).
func New(typ, format string, args ...any) *Error {
	return &Error{Type: typ, Message: fmt.Sprintf(format, args...)}
}

// generic is each type's message when the failure has none of its own.
var generic = map[string]string{
	Validation: "the model's reply could not be used",
	Timeout:    "the model did not answer in time",
	Network:    "the model endpoint could not be reached",
	RateLimit:  "the model endpoint is limiting requests",
	Internal:   "an internal error occurred",
	Permanent:  "the model endpoint refused the request",
}

// Public returns what a client may be told about err: a message and its
// type, e.g. "the model endpoint could not be reached (network)". The
// message is the *Error's Message when it has one, else the generic
// message of err's class, so no upstream detail — addresses, keys, raw
// transport errors — ever reaches a client; log err itself for those.
// Public(nil) is "".
func Public(err error) string {
	if err == nil {
		return ""
	}
	c := Classify(err)
	msg := generic[c.Type]
	var fe *Error
	if errors.As(err, &fe) && fe.Message != "" && fe.Type == c.Type {
		msg = fe.Message
	}
	return msg + " (" + c.Type + ")"
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
