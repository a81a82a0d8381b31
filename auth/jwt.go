package auth

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
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

var (
	_ Verifier   = (*JWT)(nil)
	_ Identifier = (*JWT)(nil)
)

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
	id, err := j.Identify(token)
	return id.Subject, err
}

// Identify is Verify that also says until when the token is accepted:
// its exp plus the leeway.
//
// The header and the claims are read strictly, so that a signed token
// has one meaning: each part is canonical unpadded base64url and a
// single JSON object of valid UTF-8 with nothing after it, whose member
// names are matched exactly (RFC 7519 §4: claim names are case
// sensitive; "SUB" is not sub) and may not repeat, nor differ only in
// case — encoding/json alone would take the last of two subs, or a SUB,
// for sub.
func (j *JWT) Identify(token string) (Identity, error) {
	h64, rest, ok := strings.Cut(token, ".")
	p64, s64, ok2 := strings.Cut(rest, ".")
	if !ok || !ok2 || strings.Contains(s64, ".") {
		return Identity{}, ErrMalformed
	}
	header, err := decodePart(h64)
	if err != nil {
		return Identity{}, ErrMalformed
	}
	var alg, typ *string
	if getString(header, "alg", &alg) != nil || getString(header, "typ", &typ) != nil {
		return Identity{}, ErrMalformed
	}
	if alg == nil || *alg != "HS256" {
		return Identity{}, ErrAlgorithm
	}
	if typ != nil && !strings.EqualFold(*typ, "JWT") {
		return Identity{}, fmt.Errorf("%w: JWT typ is not JWT", ErrInvalid)
	}
	if _, ok := header["crit"]; ok {
		return Identity{}, fmt.Errorf("%w: JWT header has crit extensions", ErrInvalid)
	}
	sig, err := decodeB64(s64)
	if err != nil {
		return Identity{}, ErrMalformed
	}
	mac := hmac.New(sha256.New, j.secret)
	mac.Write([]byte(token[:len(h64)+1+len(p64)]))
	if !hmac.Equal(sig, mac.Sum(nil)) {
		return Identity{}, ErrSignature
	}
	// Only a signed payload is read.
	claims, err := decodePart(p64)
	if err != nil {
		return Identity{}, ErrClaims
	}
	var sub *string
	var exp, nbf *float64
	if getString(claims, "sub", &sub) != nil || getNumber(claims, "exp", &exp) != nil || getNumber(claims, "nbf", &nbf) != nil {
		return Identity{}, ErrClaims
	}
	if sub == nil || *sub == "" || exp == nil {
		return Identity{}, ErrClaims
	}
	now := j.now()
	until := numericDate(*exp).Add(j.leeway)
	if !now.Before(until) {
		return Identity{}, ErrExpired
	}
	if nbf != nil && now.Before(numericDate(*nbf).Add(-j.leeway)) {
		return Identity{}, ErrNotYet
	}
	return Identity{Subject: *sub, Expires: until}, nil
}

// b64 is the unpadded base64url of JWS compact serialization, strict
// about trailing bits so that a signature has one encoding.
var b64 = base64.RawURLEncoding.Strict()

// decodeB64 decodes one part of a token. Only the base64url alphabet is
// allowed: the decoder itself skips CR and LF, which would give a token
// other spellings.
func decodeB64(part string) ([]byte, error) {
	for i := 0; i < len(part); i++ {
		c := part[i]
		if !('A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return nil, errAlphabet
		}
	}
	return b64.DecodeString(part)
}

var (
	errAlphabet  = errors.New("not base64url")
	errUTF8      = errors.New("not valid UTF-8")
	errDuplicate = errors.New("a member name repeated, or differing only in case")
	errTrailing  = errors.New("data after the JSON object")
)

// decodePart decodes one base64url JSON object of a token into its
// members, refusing a name that repeats or that differs from another only
// in case, and anything after the object. A decoding error's text is
// dropped by the caller: it may quote the token.
func decodePart(part string) (map[string]json.RawMessage, error) {
	b, err := decodeB64(part)
	if err != nil {
		return nil, err
	}
	if !utf8.Valid(b) { // encoding/json would turn it into U+FFFD: two spellings of one name
		return nil, errUTF8
	}
	if len(b) == 0 || b[0] != '{' {
		return nil, errNotObject
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if _, err := dec.Token(); err != nil { // {
		return nil, err
	}
	members := make(map[string]json.RawMessage)
	folded := make(map[string]bool)
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, err
		}
		name, ok := t.(string)
		if !ok {
			return nil, errNotObject
		}
		f := foldName(name)
		if folded[f] {
			return nil, errDuplicate
		}
		folded[f] = true
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		members[name] = v
	}
	if _, err := dec.Token(); err != nil { // }
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errTrailing
	}
	return members, nil
}

// foldName is name with each rune replaced by the smallest of its
// case-folding orbit: two names fold alike exactly when strings.EqualFold,
// encoding/json's matching, holds them equal.
func foldName(name string) string {
	var sb strings.Builder
	for _, r := range name {
		least := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			least = min(least, f)
		}
		sb.WriteRune(least)
	}
	return sb.String()
}

// getString sets *v to member name's string, leaving it nil when the
// member is absent or null; another type is an error.
func getString(m map[string]json.RawMessage, name string, v **string) error {
	return getMember(m, name, v)
}

// getNumber is getString for a number.
func getNumber(m map[string]json.RawMessage, name string, v **float64) error {
	return getMember(m, name, v)
}

func getMember[T any](m map[string]json.RawMessage, name string, v **T) error {
	raw, ok := m[name]
	if !ok {
		return nil
	}
	return json.Unmarshal(raw, v)
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
