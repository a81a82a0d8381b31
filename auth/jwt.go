package auth

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
)

// Why a JWT is refused; each wraps ErrInvalid.
var (
	ErrMalformed = fmt.Errorf("%w: malformed JWT", ErrInvalid)
	ErrAlgorithm = fmt.Errorf("%w: JWT algorithm is not HS256", ErrInvalid)
	ErrSignature = fmt.Errorf("%w: JWT signature does not verify", ErrInvalid)
	ErrExpired   = fmt.Errorf("%w: JWT expired", ErrInvalid)
	ErrNotYet    = fmt.Errorf("%w: JWT not valid yet (nbf)", ErrInvalid)
	ErrClaims    = fmt.Errorf("%w: JWT claims missing or of the wrong type", ErrInvalid)
	ErrShortKey  = errors.New("auth: an HS256 secret must be at least 32 bytes (RFC 7518 §3.2)")
	errNotObject = errors.New("not a JSON object")
)

// MinSecretLen is the shortest HS256 secret NewJWT accepts: as long as the
// hash's output (RFC 7518 §3.2).
const MinSecretLen = 32

// DefaultLeeway is the clock skew JWT allows on exp and nbf.
const DefaultLeeway = 30 * time.Second

// JWTOptions tune a JWT verifier. A nil *JWTOptions means the defaults.
type JWTOptions struct {
	// Leeway is the clock skew allowed on exp and nbf. Defaults to
	// DefaultLeeway; negative means none.
	Leeway time.Duration
	// Now is the clock. Defaults to time.Now.
	Now func() time.Time
}

// JWT verifies HS256 JSON Web Tokens (RFC 7519) signed with one secret.
// The header's alg must be HS256 (none and every other algorithm are
// refused, whatever the signature); the claims must hold sub, a non-empty
// string — the subject — and exp, a number, which is enforced; nbf is
// honoured when present. Both are NumericDate seconds, with Leeway
// allowed either way. A header with crit is refused: this verifier
// understands no extension.
type JWT struct {
	secret []byte
	leeway time.Duration
	now    func() time.Time
}

var _ Verifier = (*JWT)(nil)

// NewJWT returns a verifier of tokens signed with secret, which must be
// at least MinSecretLen bytes.
func NewJWT(secret []byte, opts *JWTOptions) (*JWT, error) {
	if len(secret) < MinSecretLen {
		return nil, ErrShortKey
	}
	j := &JWT{secret: bytes.Clone(secret), leeway: DefaultLeeway, now: time.Now}
	if opts != nil {
		if opts.Leeway != 0 {
			j.leeway = max(opts.Leeway, 0)
		}
		if opts.Now != nil {
			j.now = opts.Now
		}
	}
	return j, nil
}

// Verify checks token's algorithm, signature and times, and returns its
// sub claim.
func (j *JWT) Verify(token string) (string, error) {
	h64, rest, ok := strings.Cut(token, ".")
	p64, s64, ok2 := strings.Cut(rest, ".")
	if !ok || !ok2 || strings.Contains(s64, ".") {
		return "", ErrMalformed
	}
	var header struct {
		Alg  string          `json:"alg"`
		Typ  *string         `json:"typ"`
		Crit json.RawMessage `json:"crit"`
	}
	if err := decodePart(h64, &header); err != nil {
		return "", ErrMalformed
	}
	if header.Alg != "HS256" {
		return "", ErrAlgorithm
	}
	if header.Typ != nil && !strings.EqualFold(*header.Typ, "JWT") {
		return "", fmt.Errorf("%w: JWT typ is not JWT", ErrInvalid)
	}
	if header.Crit != nil {
		return "", fmt.Errorf("%w: JWT header has crit extensions", ErrInvalid)
	}
	sig, err := b64.DecodeString(s64)
	if err != nil {
		return "", ErrMalformed
	}
	mac := hmac.New(sha256.New, j.secret)
	mac.Write([]byte(token[:len(h64)+1+len(p64)]))
	if !hmac.Equal(sig, mac.Sum(nil)) {
		return "", ErrSignature
	}
	// Only a signed payload is read.
	var claims struct {
		Sub *string  `json:"sub"`
		Exp *float64 `json:"exp"`
		Nbf *float64 `json:"nbf"`
	}
	if err := decodePart(p64, &claims); err != nil {
		return "", ErrClaims
	}
	if claims.Sub == nil || *claims.Sub == "" || claims.Exp == nil {
		return "", ErrClaims
	}
	now := j.now()
	if !now.Before(numericDate(*claims.Exp).Add(j.leeway)) {
		return "", ErrExpired
	}
	if claims.Nbf != nil && now.Before(numericDate(*claims.Nbf).Add(-j.leeway)) {
		return "", ErrNotYet
	}
	return *claims.Sub, nil
}

// b64 is the unpadded base64url of JWS compact serialization, strict
// about trailing bits so that a signature has one encoding.
var b64 = base64.RawURLEncoding.Strict()

// decodePart decodes one base64url JSON object of a token into v. A
// decoding error's text is dropped by the caller: it may quote the token.
func decodePart(part string, v any) error {
	b, err := b64.DecodeString(part)
	if err != nil {
		return err
	}
	if len(b) == 0 || b[0] != '{' {
		return errNotObject
	}
	return json.Unmarshal(b, v)
}

// numericDate is a JWT NumericDate (seconds since the epoch, possibly
// fractional) as a time, saturated far in the past or future.
func numericDate(sec float64) time.Time {
	const limit = 1 << 40 // ~35,000 years: beyond it the duration math overflows
	switch {
	case math.IsNaN(sec) || sec < -limit:
		return time.Unix(-limit, 0)
	case sec > limit:
		return time.Unix(limit, 0)
	}
	whole, frac := math.Modf(sec)
	return time.Unix(int64(whole), int64(frac*1e9))
}

// SignHS256 returns an HS256 JWT of claims signed with secret, for tests,
// tools and small issuers. claims is marshalled as JSON; it should hold
// sub and exp (a Unix time in seconds).
func SignHS256(secret []byte, claims any) (string, error) {
	payload, err := json.Marshal(claims)
	if err != nil {
		return "", fmt.Errorf("sign JWT: %w", err)
	}
	s := b64.EncodeToString([]byte(`{"alg":"HS256","typ":"JWT"}`)) + "." + b64.EncodeToString(payload)
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(s))
	return s + "." + b64.EncodeToString(mac.Sum(nil)), nil
}
