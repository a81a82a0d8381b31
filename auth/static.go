package auth

import (
	"bufio"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"unicode"
)

// Pair is one static credential: the token, and the subject it names.
type Pair struct {
	Subject, Token string
}

// Static verifies tokens against a fixed list, in constant time: the time
// Verify takes depends on the list's length, never on how much of a token
// matched. A subject may have several tokens (to rotate them); a token
// names one subject.
type Static struct {
	entries []staticEntry
}

type staticEntry struct {
	hash    [sha256.Size]byte
	subject string
}

var _ Verifier = (*Static)(nil)

// NewStatic returns a Static of pairs. Every pair needs a subject and a
// token (CheckPair), and no token may appear twice.
func NewStatic(pairs []Pair) (*Static, error) {
	if len(pairs) == 0 {
		return nil, errors.New("auth: no tokens")
	}
	s := &Static{entries: make([]staticEntry, 0, len(pairs))}
	seen := make(map[[sha256.Size]byte]int, len(pairs))
	for i, p := range pairs {
		if err := CheckPair(p); err != nil {
			return nil, fmt.Errorf("auth: token %d: %w", i+1, err)
		}
		h := sha256.Sum256([]byte(p.Token))
		if j, dup := seen[h]; dup {
			return nil, fmt.Errorf("auth: tokens %d and %d are the same (a token names one subject)", j+1, i+1)
		}
		seen[h] = i
		s.entries = append(s.entries, staticEntry{hash: h, subject: p.Subject})
	}
	return s, nil
}

// Verify returns the subject of token, or an error wrapping ErrInvalid.
// Every entry is compared, whatever matched before.
func (s *Static) Verify(token string) (string, error) {
	h := sha256.Sum256([]byte(token))
	match := -1
	for i := range s.entries {
		if subtle.ConstantTimeCompare(h[:], s.entries[i].hash[:]) == 1 {
			match = i
		}
	}
	if match < 0 {
		return "", invalid("unknown token")
	}
	return s.entries[match].subject, nil
}

// CheckPair reports what is wrong with a static credential: an empty
// subject or token, a subject with spaces or control characters, or a
// token with characters that cannot travel in a header or a subprotocol
// list (anything but visible ASCII, and the comma).
func CheckPair(p Pair) error {
	switch {
	case p.Subject == "":
		return errors.New("empty subject")
	case strings.IndexFunc(p.Subject, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0:
		return fmt.Errorf("subject %q contains a space or a control character", p.Subject)
	case p.Token == "":
		return fmt.Errorf("empty token for subject %q", p.Subject)
	case len(p.Token) > MaxTokenLen:
		return fmt.Errorf("the token of subject %q is longer than %d bytes", p.Subject, MaxTokenLen)
	case strings.IndexFunc(p.Token, func(r rune) bool { return r <= ' ' || r > '~' || r == ',' }) >= 0:
		// Never quote the token, even a bad one.
		return fmt.Errorf("the token of subject %q has a character other than visible ASCII, or a comma", p.Subject)
	}
	return nil
}

// ParsePairs reads SUBJECT=TOKEN,SUBJECT=TOKEN,… (spaces around entries
// are ignored). Errors name the entry by its position, never its token.
func ParsePairs(list string) ([]Pair, error) {
	var out []Pair
	for i, e := range strings.Split(list, ",") {
		p, err := parsePair(strings.TrimSpace(e))
		if err != nil {
			return nil, fmt.Errorf("entry %d: %w", i+1, err)
		}
		out = append(out, p)
	}
	return out, nil
}

// ReadPairs reads one SUBJECT=TOKEN a line from r; blank lines and lines
// starting with # are skipped, and spaces around a line are ignored.
// Errors name the line by name:number, never its token.
func ReadPairs(r io.Reader, name string) ([]Pair, error) {
	var out []Pair
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), MaxTokenLen+1024)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		p, err := parsePair(line)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", name, n, err)
		}
		out = append(out, p)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s:%d: %w", name, n+1, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no SUBJECT=TOKEN line", name)
	}
	return out, nil
}

// LoadPairs reads static credentials as the --auth-tokens flag gives them:
// SUBJECT=TOKEN,… or @FILE, a file of one SUBJECT=TOKEN a line.
func LoadPairs(spec string) ([]Pair, error) {
	file, ok := strings.CutPrefix(spec, "@")
	if !ok {
		return ParsePairs(spec)
	}
	f, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("read the token file: %w", err)
	}
	defer f.Close()
	return ReadPairs(f, file)
}

// parsePair reads one SUBJECT=TOKEN and checks it.
func parsePair(s string) (Pair, error) {
	subject, token, ok := strings.Cut(s, "=")
	if !ok {
		if s == "" {
			return Pair{}, errors.New("empty; want SUBJECT=TOKEN")
		}
		return Pair{}, errors.New("no '='; want SUBJECT=TOKEN")
	}
	p := Pair{Subject: strings.TrimSpace(subject), Token: strings.TrimSpace(token)}
	return p, CheckPair(p)
}
