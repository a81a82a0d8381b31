package auth

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestFromRequest(t *testing.T) {
	tests := []struct {
		name    string
		target  string
		header  map[string][]string
		want    string
		wantErr error
	}{
		{"Authorization", "/ws", map[string][]string{"Authorization": {"Bearer tok-1"}}, "tok-1", nil},
		{"Authorization, scheme in lower case", "/ws", map[string][]string{"Authorization": {"bearer tok-1"}}, "tok-1", nil},
		{"Authorization with extra spaces", "/ws", map[string][]string{"Authorization": {"  Bearer   tok-1 "}}, "tok-1", nil},
		{"subprotocol", "/ws", map[string][]string{"Sec-WebSocket-Protocol": {"baton, baton.bearer.tok-1"}}, "tok-1", nil},
		{"subprotocol, first of the list", "/ws", map[string][]string{"Sec-WebSocket-Protocol": {"baton.bearer.tok-1,baton"}}, "tok-1", nil},
		{"subprotocol, header repeated", "/ws", map[string][]string{"Sec-WebSocket-Protocol": {"baton", "baton.bearer.a.b.c"}}, "a.b.c", nil},
		{"query", "/ws?access_token=tok-1", nil, "tok-1", nil},
		{"query, escaped", "/ws?x=1&access_token=a%2Bb%3D", nil, "a+b=", nil},
		{"nothing", "/ws", nil, "", ErrNoCredential},
		{"only the baton subprotocol", "/ws", map[string][]string{"Sec-WebSocket-Protocol": {"baton"}}, "", ErrNoCredential},
		{"Basic", "/ws", map[string][]string{"Authorization": {"Basic YWxpY2U6cHc="}}, "", ErrInvalid},
		{"Bearer without a token", "/ws", map[string][]string{"Authorization": {"Bearer"}}, "", ErrInvalid},
		{"Bearer with spaces only", "/ws", map[string][]string{"Authorization": {"Bearer   "}}, "", ErrInvalid},
		{"two Authorization headers", "/ws", map[string][]string{"Authorization": {"Bearer a", "Bearer b"}}, "", ErrInvalid},
		{"two bearer subprotocols", "/ws", map[string][]string{"Sec-WebSocket-Protocol": {"baton.bearer.a, baton.bearer.b"}}, "", ErrInvalid},
		{"an empty bearer subprotocol", "/ws", map[string][]string{"Sec-WebSocket-Protocol": {"baton, baton.bearer."}}, "", ErrInvalid},
		{"two query parameters", "/ws?access_token=a&access_token=b", nil, "", ErrInvalid},
		{"an empty query parameter", "/ws?access_token=", nil, "", ErrInvalid},
		{"header and query", "/ws?access_token=a", map[string][]string{"Authorization": {"Bearer a"}}, "", ErrInvalid},
		{"subprotocol and query", "/ws?access_token=a", map[string][]string{"Sec-WebSocket-Protocol": {"baton, baton.bearer.a"}}, "", ErrInvalid},
		{"too long", "/ws?access_token=" + strings.Repeat("x", MaxTokenLen+1), nil, "", ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, tt.target, nil)
			for k, vs := range tt.header {
				for _, v := range vs {
					r.Header.Add(k, v)
				}
			}
			got, err := FromRequest(r)
			if got != tt.want || !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Fatalf("got %q, %v; want %q, %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestStatic(t *testing.T) {
	s, err := NewStatic([]Pair{{"alice", "tok-alice"}, {"bob", "tok-bob"}, {"alice", "tok-alice-2"}})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		token, want string
	}{
		{"tok-alice", "alice"},
		{"tok-alice-2", "alice"},
		{"tok-bob", "bob"},
		{"tok-bo", ""},
		{"tok-bobb", ""},
		{"TOK-BOB", ""},
		{"", ""},
	}
	for _, tt := range tests {
		t.Run(tt.token, func(t *testing.T) {
			got, err := s.Verify(tt.token)
			if got != tt.want || (tt.want == "") != errors.Is(err, ErrInvalid) {
				t.Fatalf("Verify = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func TestNewStaticRefuses(t *testing.T) {
	tests := []struct {
		name  string
		pairs []Pair
		want  string
	}{
		{"none", nil, "no tokens"},
		{"an empty token", []Pair{{"alice", ""}}, `token 1: empty token for subject "alice"`},
		{"an empty subject", []Pair{{"alice", "a"}, {"", "b"}}, "token 2: empty subject"},
		{"a space in the subject", []Pair{{"al ice", "a"}}, "contains a space"},
		{"a space in the token", []Pair{{"alice", "a b"}}, "visible ASCII"},
		{"a comma in the token", []Pair{{"alice", "a,b"}}, "visible ASCII"},
		{"a non-ASCII token", []Pair{{"alice", "tökén"}}, "visible ASCII"},
		{"a token twice", []Pair{{"alice", "tok-x"}, {"bob", "tok-x"}}, "tokens 1 and 2 are the same"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewStatic(tt.pairs)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err %v, want one saying %q", err, tt.want)
			}
			for _, p := range tt.pairs {
				if len(p.Token) > 1 && strings.Contains(err.Error(), p.Token) {
					t.Fatalf("the error quotes a token: %v", err)
				}
			}
		})
	}
}

func TestParsePairs(t *testing.T) {
	tests := []struct {
		name    string
		list    string
		want    []Pair
		wantErr string
	}{
		{"one", "alice=tok-a", []Pair{{"alice", "tok-a"}}, ""},
		{"several, with spaces", " alice=tok-a , bob = tok-b", []Pair{{"alice", "tok-a"}, {"bob", "tok-b"}}, ""},
		{"a token with =", "alice=YWJj==", []Pair{{"alice", "YWJj=="}}, ""},
		{"no =", "alice=tok-a,secret-token", nil, "entry 2: no '='"},
		{"a stray comma", "alice=tok-a,", nil, "entry 2: empty"},
		{"empty token", "alice=", nil, "entry 1: empty token"},
		{"empty subject", "=tok", nil, "entry 1: empty subject"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParsePairs(tt.list)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err %v, want one saying %q", err, tt.wantErr)
				}
				if strings.Contains(err.Error(), "secret-token") {
					t.Fatalf("the error quotes a token: %v", err)
				}
				return
			}
			if err != nil || !slices.Equal(got, tt.want) {
				t.Fatalf("got %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}

func TestLoadPairsFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good", "# operators\nalice=tok-a\n\n  bob=tok-b  \r\n# end\n")
	tests := []struct {
		name    string
		spec    string
		want    []Pair
		wantErr string
	}{
		{"a file", "@" + good, []Pair{{"alice", "tok-a"}, {"bob", "tok-b"}}, ""},
		{"a list", "carol=tok-c", []Pair{{"carol", "tok-c"}}, ""},
		{"a bad line", "@" + write("bad", "alice=tok-a\n\njust-a-secret\n"), nil, "bad:3: no '='"},
		{"an empty token", "@" + write("empty", "alice=\n"), nil, "empty:1: empty token"},
		{"no lines", "@" + write("blank", "# nothing\n\n"), nil, "blank: no SUBJECT=TOKEN line"},
		{"no file", "@" + filepath.Join(dir, "missing"), nil, "read the token file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := LoadPairs(tt.spec)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err %v, want one saying %q", err, tt.wantErr)
				}
				if strings.Contains(err.Error(), "just-a-secret") {
					t.Fatalf("the error quotes a token: %v", err)
				}
				return
			}
			if err != nil || !slices.Equal(got, tt.want) {
				t.Fatalf("got %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}

func TestAuthenticator(t *testing.T) {
	s, err := NewStatic([]Pair{{"alice", "tok-a"}})
	if err != nil {
		t.Fatal(err)
	}
	authn := Authenticator(s)
	tests := []struct {
		name    string
		target  string
		header  string // Authorization
		want    string
		wantErr error
	}{
		{"good", "/ws", "Bearer tok-a", "alice", nil},
		{"good in the query", "/ws?access_token=tok-a", "", "alice", nil},
		{"unknown", "/ws", "Bearer tok-b", "", ErrInvalid},
		{"none", "/ws", "", "", ErrNoCredential},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, tt.target, nil)
			if tt.header != "" {
				r.Header.Set("Authorization", tt.header)
			}
			got, err := authn(r)
			if got.Subject != tt.want || !got.Expires.IsZero() || !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Fatalf("got %q, %v; want %q, %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
}
