// Package auth decides who is opening a WebSocket: it takes the bearer
// credential out of the handshake request and verifies it, with static
// tokens (Static) or HS256 JSON Web Tokens (JWT), returning the subject it
// names. It knows nothing of sessions or of the protocol spoken after the
// upgrade; the orchestrator binds what it returns to the session.
//
// A credential travels in exactly one of three places (RFC 6750 asks a
// client to use one): the Authorization header (Bearer), the access_token
// query parameter, or a Sec-WebSocket-Protocol value baton.bearer.TOKEN
// offered next to the protocol baton — browsers can set neither headers
// nor Authorization on a WebSocket, only the URL and the protocols. A
// server reading the subprotocol must select baton in its answer, or the
// browser fails the handshake.
//
// No error of this package contains a token or any part of one, so that
// errors may be logged.
package auth

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// Errors of FromRequest and of the verifiers. Every error about a
// credential that is present wraps ErrInvalid; the more precise ones
// (ErrExpired and the like) wrap it too.
var (
	// ErrNoCredential: the request carries no credential at all.
	ErrNoCredential = errors.New("auth: no credential")
	// ErrInvalid: the credential is malformed, unknown, forged, expired or
	// given more than once.
	ErrInvalid = errors.New("auth: invalid credential")
)

// Subprotocol is the WebSocket subprotocol a client offers beside
// BearerPrefix+token, and the one the server selects.
const Subprotocol = "baton"

// BearerPrefix starts the Sec-WebSocket-Protocol value that carries a
// token: baton.bearer.TOKEN. A token sent this way must consist of the
// characters an HTTP token allows (RFC 9110 §5.6.2; a JWT always does).
const BearerPrefix = "baton.bearer."

// QueryParam is the query parameter that carries a token.
const QueryParam = "access_token"

// MaxTokenLen is the longest token accepted, in bytes.
const MaxTokenLen = 8192

// Verifier checks a bearer token and returns the subject it names. Verify
// may be called concurrently.
type Verifier interface {
	Verify(token string) (subject string, err error)
}

// Authenticator returns a function that authenticates a handshake request
// with v: the credential is taken from r (FromRequest) and verified. The
// identity's Expires is set when v is an Identifier.
func Authenticator(v Verifier) func(r *http.Request) (Identity, error) {
	return func(r *http.Request) (Identity, error) {
		token, err := FromRequest(r)
		if err != nil {
			return Identity{}, err
		}
		if iv, ok := v.(Identifier); ok {
			return iv.Identify(token)
		}
		sub, err := v.Verify(token)
		return Identity{Subject: sub}, err
	}
}

// FromRequest returns the bearer token r carries in its Authorization
// header, its access_token query parameter or a baton.bearer.TOKEN
// subprotocol. It fails with ErrNoCredential when there is none, and with
// an error wrapping ErrInvalid when the credential is malformed or given
// in more than one place, or more than once.
func FromRequest(r *http.Request) (string, error) {
	var found []string
	var where []string
	if hs := r.Header.Values("Authorization"); len(hs) > 0 {
		if len(hs) > 1 {
			return "", invalid("more than one Authorization header")
		}
		scheme, token, _ := strings.Cut(strings.TrimSpace(hs[0]), " ")
		if !strings.EqualFold(scheme, "Bearer") {
			return "", invalid("the Authorization header is not a Bearer credential")
		}
		found, where = append(found, strings.TrimSpace(token)), append(where, "Authorization")
	}
	var protos []string
	for _, h := range r.Header.Values("Sec-WebSocket-Protocol") {
		for p := range strings.SplitSeq(h, ",") {
			if t, ok := strings.CutPrefix(strings.TrimSpace(p), BearerPrefix); ok {
				protos = append(protos, t)
			}
		}
	}
	switch len(protos) {
	case 0:
	case 1:
		found, where = append(found, protos[0]), append(where, "Sec-WebSocket-Protocol")
	default:
		return "", invalid("more than one " + BearerPrefix + " subprotocol")
	}
	if qs, ok := r.URL.Query()[QueryParam]; ok {
		if len(qs) > 1 {
			return "", invalid("more than one " + QueryParam + " parameter")
		}
		found, where = append(found, qs[0]), append(where, QueryParam)
	}
	switch {
	case len(found) == 0:
		return "", ErrNoCredential
	case len(found) > 1:
		return "", invalid("a credential in more than one place (" + strings.Join(where, ", ") + "); send one")
	case found[0] == "":
		return "", invalid("an empty token in " + where[0])
	case len(found[0]) > MaxTokenLen:
		return "", invalid(fmt.Sprintf("a token longer than %d bytes", MaxTokenLen))
	}
	return found[0], nil
}

// invalid is an ErrInvalid saying why; why never quotes the credential.
func invalid(why string) error {
	return fmt.Errorf("%w: %s", ErrInvalid, why)
}

// Identity is who a credential names, and until when it is good.
type Identity struct {
	Subject string
	// Expires is when the credential stops being accepted (a JWT's exp
	// plus the leeway); the zero time for a credential that does not
	// expire (a static token).
	Expires time.Time
}

// Identifier is a Verifier that also says until when a credential is
// good (JWT). Authenticator uses it when its Verifier is one.
type Identifier interface {
	Identify(token string) (Identity, error)
}
