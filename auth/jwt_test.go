package auth

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"
)

var (
	secret = []byte("0123456789abcdef0123456789abcdef")
	now    = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
)

// forge builds a token from raw header and claims JSON, signed with key
// (HMAC-SHA256, whatever the header says).
func forge(header, claims string, key []byte) string {
	enc := base64.RawURLEncoding
	s := enc.EncodeToString([]byte(header)) + "." + enc.EncodeToString([]byte(claims))
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(s))
	return s + "." + enc.EncodeToString(mac.Sum(nil))
}

const hs256 = `{"alg":"HS256","typ":"JWT"}`

func unix(d time.Duration) int64 { return now.Add(d).Unix() }

func claims(sub string, exp int64, extra string) string {
	s := `{"sub":"` + sub + `","exp":` + fmtInt(exp)
	if extra != "" {
		s += "," + extra
	}
	return s + "}"
}

func fmtInt(n int64) string { return strconv.FormatInt(n, 10) }

func TestJWT(t *testing.T) {
	good := forge(hs256, claims("alice", unix(time.Hour), ""), secret)
	tests := []struct {
		name    string
		token   string
		want    string // the subject; "" when refused
		wantErr error
	}{
		{"good", good, "alice", nil},
		{"good, no typ", forge(`{"alg":"HS256"}`, claims("alice", unix(time.Hour), ""), secret), "alice", nil},
		{"good, signed by SignHS256", mustSign(t, map[string]any{"sub": "bob", "exp": unix(time.Minute)}), "bob", nil},
		{"fractional exp", forge(hs256, `{"sub":"alice","exp":`+fmtInt(unix(time.Hour))+`.5}`, secret), "alice", nil},
		{"expired", forge(hs256, claims("alice", unix(-time.Hour), ""), secret), "", ErrExpired},
		{"expired just now, within the leeway", forge(hs256, claims("alice", unix(-10*time.Second), ""), secret), "alice", nil},
		{"expired beyond the leeway", forge(hs256, claims("alice", unix(-31*time.Second), ""), secret), "", ErrExpired},
		{"nbf in the past", forge(hs256, claims("alice", unix(time.Hour), `"nbf":`+fmtInt(unix(-time.Minute))), secret), "alice", nil},
		{"nbf in the future", forge(hs256, claims("alice", unix(time.Hour), `"nbf":`+fmtInt(unix(time.Minute))), secret), "", ErrNotYet},
		{"nbf within the leeway", forge(hs256, claims("alice", unix(time.Hour), `"nbf":`+fmtInt(unix(20*time.Second))), secret), "alice", nil},
		{"no exp", forge(hs256, `{"sub":"alice"}`, secret), "", ErrClaims},
		{"exp a string", forge(hs256, `{"sub":"alice","exp":"`+fmtInt(unix(time.Hour))+`"}`, secret), "", ErrClaims},
		{"exp null", forge(hs256, `{"sub":"alice","exp":null}`, secret), "", ErrClaims},
		{"nbf a string", forge(hs256, claims("alice", unix(time.Hour), `"nbf":"0"`), secret), "", ErrClaims},
		{"no sub", forge(hs256, `{"exp":`+fmtInt(unix(time.Hour))+`}`, secret), "", ErrClaims},
		{"empty sub", forge(hs256, claims("", unix(time.Hour), ""), secret), "", ErrClaims},
		{"sub a number", forge(hs256, `{"sub":5,"exp":`+fmtInt(unix(time.Hour))+`}`, secret), "", ErrClaims},
		{"claims not an object", forge(hs256, `["alice"]`, secret), "", ErrClaims},
		{"wrong secret", forge(hs256, claims("alice", unix(time.Hour), ""), []byte("another secret of at least 32 bytes!")), "", ErrSignature},
		{"alg none, no signature", strings.TrimSuffix(forge(`{"alg":"none","typ":"JWT"}`, claims("alice", unix(time.Hour), ""), secret), sigOf(good)), "", ErrAlgorithm},
		{"alg none, signed anyway", forge(`{"alg":"none"}`, claims("alice", unix(time.Hour), ""), secret), "", ErrAlgorithm},
		{"alg None", forge(`{"alg":"None"}`, claims("alice", unix(time.Hour), ""), secret), "", ErrAlgorithm},
		{"alg hs256 (case)", forge(`{"alg":"hs256"}`, claims("alice", unix(time.Hour), ""), secret), "", ErrAlgorithm},
		{"alg HS512", forge(`{"alg":"HS512"}`, claims("alice", unix(time.Hour), ""), secret), "", ErrAlgorithm},
		{"alg RS256", forge(`{"alg":"RS256"}`, claims("alice", unix(time.Hour), ""), secret), "", ErrAlgorithm},
		{"no alg", forge(`{"typ":"JWT"}`, claims("alice", unix(time.Hour), ""), secret), "", ErrAlgorithm},
		{"typ not JWT", forge(`{"alg":"HS256","typ":"JWE"}`, claims("alice", unix(time.Hour), ""), secret), "", ErrInvalid},
		{"crit header", forge(`{"alg":"HS256","crit":["exp"]}`, claims("alice", unix(time.Hour), ""), secret), "", ErrInvalid},
		{"tampered payload", tamper(good, 1, claims("mallory", unix(time.Hour), "")), "", ErrSignature},
		{"tampered header", tamper(good, 0, `{"alg":"HS256","typ":"jwt"}`), "", ErrSignature},
		{"tampered signature", good[:len(good)-2] + flip(good[len(good)-2]) + good[len(good)-1:], "", ErrSignature},
		{"signature cut", good[:len(good)-4], "", ErrInvalid},
		{"signature with padding", good + "=", "", ErrMalformed},
		{"empty signature", good[:strings.LastIndexByte(good, '.')+1], "", ErrSignature},
		{"two parts", good[:strings.LastIndexByte(good, '.')], "", ErrMalformed},
		{"four parts", good + ".x", "", ErrMalformed},
		{"not base64", "!!." + strings.SplitN(good, ".", 2)[1], "", ErrMalformed},
		{"header not JSON", forge(`alg=HS256`, claims("alice", unix(time.Hour), ""), secret), "", ErrMalformed},
		{"empty", "", "", ErrMalformed},
		{"a static token", "s3cret-token", "", ErrMalformed},
	}
	v, err := NewJWT(secret, &JWTOptions{Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sub, err := v.Verify(tt.token)
			if sub != tt.want {
				t.Errorf("subject %q, want %q", sub, tt.want)
			}
			if tt.wantErr == nil && err != nil {
				t.Fatalf("err %v, want none", err)
			}
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) || !errors.Is(err, ErrInvalid) {
					t.Fatalf("err %v, want %v (and ErrInvalid)", err, tt.wantErr)
				}
				if tt.token != "" && strings.Contains(err.Error(), tt.token) {
					t.Fatalf("the error quotes the token: %v", err)
				}
			}
		})
	}
}

func TestJWTLeeway(t *testing.T) {
	tok := forge(hs256, claims("alice", unix(-5*time.Second), ""), secret)
	tests := []struct {
		name   string
		leeway time.Duration
		ok     bool
	}{
		{"default", 0, true},
		{"none", -1, false},
		{"a second", time.Second, false},
		{"a minute", time.Minute, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, err := NewJWT(secret, &JWTOptions{Leeway: tt.leeway, Now: func() time.Time { return now }})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := v.Verify(tok); (err == nil) != tt.ok {
				t.Fatalf("err %v, want ok=%v", err, tt.ok)
			}
		})
	}
}

func TestNewJWTShortSecret(t *testing.T) {
	if _, err := NewJWT([]byte("short"), nil); !errors.Is(err, ErrShortKey) {
		t.Fatalf("err %v, want ErrShortKey", err)
	}
	// The verifier keeps its own copy of the secret.
	key := []byte(string(secret))
	v, err := NewJWT(key, nil)
	if err != nil {
		t.Fatal(err)
	}
	tok := mustSign(t, map[string]any{"sub": "a", "exp": time.Now().Add(time.Hour).Unix()})
	key[0] ^= 1
	if _, err := v.Verify(tok); err != nil {
		t.Fatalf("after the caller changed its slice: %v", err)
	}
}

func mustSign(t *testing.T, claims map[string]any) string {
	t.Helper()
	tok, err := SignHS256(secret, claims)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// tamper replaces part i (0 header, 1 payload) of a token, keeping its
// signature.
func tamper(tok string, i int, json string) string {
	parts := strings.Split(tok, ".")
	parts[i] = base64.RawURLEncoding.EncodeToString([]byte(json))
	return strings.Join(parts, ".")
}

func sigOf(tok string) string { return tok[strings.LastIndexByte(tok, '.')+1:] }

func flip(c byte) string {
	if c == 'A' {
		return "B"
	}
	return "A"
}

// TestJWTStrict: a signed token has one meaning. Member names repeated,
// or differing only in case, at the top of the header or the claims are
// refused (encoding/json alone takes the last, whatever its case), as are
// names in another case than the RFC's, non-canonical base64url and JSON
// that is not exactly one object of valid UTF-8.
func TestJWTStrict(t *testing.T) {
	exp := fmtInt(unix(time.Hour))
	good := forge(hs256, claims("eve", unix(time.Hour), ""), secret)
	h64, _, _ := strings.Cut(good, ".")
	tests := []struct {
		name    string
		token   string
		want    string // the subject; "" when refused
		wantErr error
	}{
		{"sub and SUB", forge(hs256, `{"sub":"eve","SUB":"alice","exp":`+exp+`}`, secret), "", ErrClaims},
		{"SUB and sub", forge(hs256, `{"SUB":"alice","sub":"eve","exp":`+exp+`}`, secret), "", ErrClaims},
		{"sub twice", forge(hs256, `{"sub":"eve","exp":`+exp+`,"sub":"alice"}`, secret), "", ErrClaims},
		{"sub and Sub", forge(hs256, `{"sub":"eve","Sub":"alice","exp":`+exp+`}`, secret), "", ErrClaims},
		{"exp twice", forge(hs256, `{"sub":"eve","exp":`+exp+`,"exp":`+exp+`}`, secret), "", ErrClaims},
		{"exp and EXP", forge(hs256, `{"sub":"eve","exp":1,"EXP":`+exp+`}`, secret), "", ErrClaims},
		{"nbf and Nbf", forge(hs256, `{"sub":"eve","exp":`+exp+`,"nbf":1,"Nbf":1}`, secret), "", ErrClaims},
		{"an unknown claim twice", forge(hs256, `{"sub":"eve","exp":`+exp+`,"x":1,"X":2}`, secret), "", ErrClaims},
		{"a Kelvin sign folds to k", forge(hs256, `{"sub":"eve","exp":`+exp+`,"k":1,"\u212a":2}`, secret), "", ErrClaims},
		{"SUB alone is not sub", forge(hs256, `{"SUB":"alice","exp":`+exp+`}`, secret), "", ErrClaims},
		{"EXP alone is not exp", forge(hs256, `{"sub":"eve","EXP":`+exp+`}`, secret), "", ErrClaims},
		{"duplicates below the top level are the claim's own", forge(hs256, `{"sub":"eve","exp":`+exp+`,"o":{"a":1,"a":2}}`, secret), "eve", nil},
		{"alg twice", forge(`{"alg":"none","alg":"HS256"}`, claims("eve", unix(time.Hour), ""), secret), "", ErrMalformed},
		{"alg and ALG", forge(`{"ALG":"none","alg":"HS256"}`, claims("eve", unix(time.Hour), ""), secret), "", ErrMalformed},
		{"ALG alone is not alg", forge(`{"ALG":"HS256"}`, claims("eve", unix(time.Hour), ""), secret), "", ErrAlgorithm},
		{"typ and TYP", forge(`{"alg":"HS256","typ":"JWT","TYP":"JWT"}`, claims("eve", unix(time.Hour), ""), secret), "", ErrMalformed},
		{"CRIT is a duplicate-free unknown member", forge(`{"alg":"HS256","CRIT":["x"]}`, claims("eve", unix(time.Hour), ""), secret), "eve", nil},
		{"alg not a string", forge(`{"alg":1}`, claims("eve", unix(time.Hour), ""), secret), "", ErrMalformed},
		{"data after the claims", forge(hs256, claims("eve", unix(time.Hour), "")+`{}`, secret), "", ErrClaims},
		{"data after the header", forge(hs256+` 1`, claims("eve", unix(time.Hour), ""), secret), "", ErrMalformed},
		{"white space after the claims", forge(hs256, claims("eve", unix(time.Hour), "")+" \n", secret), "eve", nil},
		{"claims not valid UTF-8", forge(hs256, "{\"sub\":\"eve\xff\",\"exp\":"+exp+"}", secret), "", ErrClaims},
		{"a member name not valid UTF-8", forge(hs256, "{\"sub\":\"eve\",\"exp\":"+exp+",\"\xff\":1,\"\xfe\":1}", secret), "", ErrClaims},
		{"a newline in the header's base64", h64[:4] + "\n" + good[4:], "", ErrMalformed},
		{"a CR in the signature", good[:len(good)-3] + "\r" + good[len(good)-3:], "", ErrMalformed},
		{"standard base64 alphabet", strings.NewReplacer("-", "+", "_", "/").Replace(forge(hs256, `{"sub":"eve>>>","exp":`+exp+`,"p":"??>"}`, secret)), "", ErrMalformed},
		{"padded header", strings.Replace(forge(`{"alg":"HS256"}`, claims("eve", unix(time.Hour), ""), secret), ".", "=.", 1), "", ErrMalformed},
		{"non-zero trailing bits", h64[:len(h64)-1] + flip(h64[len(h64)-1]) + good[len(h64):], "", ErrMalformed},
	}
	v, err := NewJWT(secret, &JWTOptions{Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sub, err := v.Verify(tt.token)
			if sub != tt.want || !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Fatalf("got %q, %v; want %q, %v", sub, err, tt.want, tt.wantErr)
			}
			if err != nil && !errors.Is(err, ErrInvalid) {
				t.Fatalf("err %v does not wrap ErrInvalid", err)
			}
		})
	}
}

// TestJWTIdentify: a token is good until its exp plus the leeway.
func TestJWTIdentify(t *testing.T) {
	exp := unix(time.Hour)
	v, err := NewJWT(secret, &JWTOptions{Leeway: 10 * time.Second, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	id, err := v.Identify(forge(hs256, claims("alice", exp, ""), secret))
	if err != nil || id.Subject != "alice" || !id.Expires.Equal(time.Unix(exp, 0).Add(10*time.Second)) {
		t.Fatalf("got %+v, %v; want alice until exp+10s", id, err)
	}
}
