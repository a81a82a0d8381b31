package client

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// decodeFrame decodes a server frame's envelope into f without
// encoding/json: the client reads every frame of a load, and validating
// and decoding each one through reflection cost more CPU than the rest of
// the client together. Keys may come in any order, with any whitespace;
// unknown keys are skipped. Metadata is kept as it came, a slice of data
// (not validated: what reads it decodes it), so data must not be reused.
// names interns event names and session ids; nil allocates each.
func decodeFrame(data []byte, f *Frame, names interner) error {
	d := scanner{b: data}
	if !d.byte('{') {
		return d.fail("want an object")
	}
	if d.byte('}') {
		return d.end()
	}
	for {
		key, err := d.str()
		if err != nil {
			return err
		}
		if !d.byte(':') {
			return d.fail("want ':'")
		}
		switch string(key) {
		case "event":
			f.Event, err = d.name(names)
		case "event_id":
			f.EventID, err = d.text()
		case "seq":
			f.Seq, err = d.uint()
		case "session_id":
			f.SessionID, err = d.name(names)
		case "step_id":
			f.StepID, err = d.text()
		case "timestamp":
			f.Timestamp, err = d.time()
		case "content":
			f.Content, err = d.text()
		case "metadata":
			start := d.skipSpace()
			if err = d.skip(); err == nil {
				f.Metadata = json.RawMessage(data[start:d.i:d.i])
			}
		default:
			err = d.skip()
		}
		if err != nil {
			return fmt.Errorf("%q: %w", key, err)
		}
		if d.byte(',') {
			continue
		}
		if d.byte('}') {
			return d.end()
		}
		return d.fail("want ',' or '}'")
	}
}

// metaString returns the top-level string field key of a JSON object,
// unescaped, and whether it was there as a string.
func metaString(obj []byte, key string) (string, bool) {
	d := scanner{b: obj}
	if !d.byte('{') || d.byte('}') {
		return "", false
	}
	for {
		k, err := d.str()
		if err != nil || !d.byte(':') {
			return "", false
		}
		if string(k) == key {
			s, err := d.text()
			return s, err == nil
		}
		d.skipSpace()
		if d.skip() != nil || !d.byte(',') {
			return "", false
		}
	}
}

// interner hands out one string per distinct name (event names, the
// session's id) instead of a new one per frame. It holds at most
// maxInterned names: a peer sending endless distinct names gets fresh
// strings, not an endless map.
type interner map[string]string

const maxInterned = 128

func (in interner) get(b []byte) string {
	if s, ok := in[string(b)]; ok {
		return s
	}
	s := string(b)
	if len(in) < maxInterned {
		in[s] = s
	}
	return s
}

var errSyntax = errors.New("invalid JSON")

// scanner walks a JSON text. It checks the structure it walks through,
// not every literal it skips: a skipped number or nested value is only
// delimited.
type scanner struct {
	b []byte
	i int
}

func (d *scanner) fail(what string) error {
	return fmt.Errorf("%w: %s at offset %d", errSyntax, what, d.i)
}

// skipSpace skips whitespace and returns the offset of what follows.
func (d *scanner) skipSpace() int {
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return d.i
		}
	}
	return d.i
}

// byte consumes c, after whitespace, if it comes next.
func (d *scanner) byte(c byte) bool {
	if d.skipSpace() < len(d.b) && d.b[d.i] == c {
		d.i++
		return true
	}
	return false
}

// end checks nothing but whitespace follows.
func (d *scanner) end() error {
	if d.skipSpace() != len(d.b) {
		return d.fail("data after the object")
	}
	return nil
}

// str consumes a string and returns its raw contents (escapes left in).
func (d *scanner) str() ([]byte, error) {
	if !d.byte('"') {
		return nil, d.fail("want a string")
	}
	start := d.i
	for d.i < len(d.b) {
		switch c := d.b[d.i]; {
		case c == '"':
			d.i++
			return d.b[start : d.i-1], nil
		case c == '\\':
			d.i += 2
		case c < 0x20:
			return nil, d.fail("control character in a string")
		default:
			d.i++
		}
	}
	return nil, d.fail("unterminated string")
}

// null consumes a null if one comes next.
func (d *scanner) null() bool {
	if d.skipSpace()+4 <= len(d.b) && string(d.b[d.i:d.i+4]) == "null" {
		d.i += 4
		return true
	}
	return false
}

// text consumes a string (or null, as "") and returns it unescaped.
func (d *scanner) text() (string, error) {
	if d.null() {
		return "", nil
	}
	start := d.skipSpace()
	raw, err := d.str()
	if err != nil {
		return "", err
	}
	if bytes.IndexByte(raw, '\\') < 0 {
		return string(raw), nil
	}
	var s string // escapes are rare: the standard decoder does them
	if err := json.Unmarshal(d.b[start:d.i], &s); err != nil {
		return "", err
	}
	return s, nil
}

// name is text, interned in in (when not nil).
func (d *scanner) name(in interner) (string, error) {
	if in == nil {
		return d.text()
	}
	if d.null() {
		return "", nil
	}
	save := d.i
	raw, err := d.str()
	if err != nil {
		return "", err
	}
	if bytes.IndexByte(raw, '\\') >= 0 {
		d.i = save
		return d.text()
	}
	return in.get(raw), nil
}

// uint consumes an unsigned integer (or null, as 0).
func (d *scanner) uint() (uint64, error) {
	if d.null() {
		return 0, nil
	}
	start := d.skipSpace()
	for d.i < len(d.b) && d.b[d.i] >= '0' && d.b[d.i] <= '9' {
		d.i++
	}
	n, err := strconv.ParseUint(string(d.b[start:d.i]), 10, 64)
	if err != nil || d.b[start] == '0' && d.i-start > 1 {
		return 0, d.fail("want an unsigned integer")
	}
	return n, nil
}

// time consumes an RFC 3339 timestamp string (or null, as the zero time).
func (d *scanner) time() (time.Time, error) {
	if d.null() {
		return time.Time{}, nil
	}
	raw, err := d.str()
	if err != nil {
		return time.Time{}, err
	}
	t, err := time.Parse(time.RFC3339, string(raw))
	if err != nil {
		return time.Time{}, fmt.Errorf("timestamp: %w", err)
	}
	return t, nil
}

// skip consumes one value of any kind. Nested values are matched
// bracket for bracket, strings whole; literals and numbers only
// delimited.
func (d *scanner) skip() error {
	if d.skipSpace() == len(d.b) {
		return d.fail("want a value")
	}
	switch d.b[d.i] {
	case '"':
		_, err := d.str()
		return err
	case '{', '[':
		depth := 0
		for d.i < len(d.b) {
			switch d.b[d.i] {
			case '"':
				if _, err := d.str(); err != nil {
					return err
				}
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					d.i++
					return nil
				}
			}
			d.i++
		}
		return d.fail("unterminated value")
	case '}', ']', ',', ':':
		return d.fail("want a value")
	}
	start := d.i
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return nil
		}
		d.i++
	}
	if d.i == start {
		return d.fail("want a value")
	}
	return nil
}
