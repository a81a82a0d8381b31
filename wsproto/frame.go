package wsproto

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"
)

// Frame is a server → client frame before encoding. Seq 0 means unsequenced:
// the field is left out of the JSON.
type Frame struct {
	Event     string
	EventID   string
	Seq       uint64
	SessionID string
	StepID    string
	Timestamp time.Time
	Content   string
	// Metadata is one of this package's metadata structs (or any value that
	// encodes as a JSON object). Nil encodes as {}.
	Metadata any
}

// AppendFrame appends the JSON encoding of f to dst. The envelope is written
// by hand, in the contract's field order, and so is the metadata of the
// frequent events (metajson.go); any other metadata goes through
// encoding/json. On an error dst is returned as it was.
func AppendFrame(dst []byte, f Frame) ([]byte, error) {
	start := len(dst)
	dst = appendHead(dst, f)
	if m, ok := f.Metadata.(metadataAppender); ok {
		if b, ok := m.appendJSON(dst); ok {
			return append(b, '}'), nil
		}
	}
	if f.Metadata == nil {
		return append(dst, '{', '}', '}'), nil
	}
	meta, err := json.Marshal(f.Metadata)
	if err != nil {
		return dst[:start], fmt.Errorf("encode %s metadata: %w", f.Event, err)
	}
	if len(meta) == 0 || meta[0] != '{' {
		return dst[:start], fmt.Errorf("encode %s metadata: not a JSON object", f.Event)
	}
	return append(append(dst, meta...), '}'), nil
}

// appendFrame appends f's envelope around meta, its metadata encoded (nil
// for {}); f.Metadata is not looked at.
func appendFrame(dst []byte, f Frame, meta []byte) []byte {
	dst = appendHead(dst, f)
	if meta == nil {
		dst = append(dst, '{', '}')
	} else {
		dst = append(dst, meta...)
	}
	return append(dst, '}')
}

// appendHead appends f's envelope up to its metadata's value.
func appendHead(dst []byte, f Frame) []byte {
	dst = append(dst, `{"event":`...)
	dst = appendString(dst, f.Event)
	dst = append(dst, `,"event_id":`...)
	dst = appendString(dst, f.EventID)
	if f.Seq != 0 {
		dst = append(dst, `,"seq":`...)
		dst = strconv.AppendUint(dst, f.Seq, 10)
	}
	dst = append(dst, `,"session_id":`...)
	dst = appendString(dst, f.SessionID)
	if f.StepID != "" {
		dst = append(dst, `,"step_id":`...)
		dst = appendString(dst, f.StepID)
	}
	dst = append(dst, `,"timestamp":"`...)
	dst = f.Timestamp.UTC().AppendFormat(dst, time.RFC3339Nano)
	dst = append(dst, `","content":`...)
	dst = appendString(dst, f.Content)
	return append(dst, `,"metadata":`...)
}

const hexDigits = "0123456789abcdef"

// htmlSafe holds the ASCII bytes a JSON string keeps as they are: what
// encoding/json calls its htmlSafeSet. One load per byte is what keeps
// appendString, most of a frame's encoding, fast.
var htmlSafe = func() (t [utf8.RuneSelf]bool) {
	for b := byte(0x20); b < utf8.RuneSelf; b++ {
		t[b] = b != '"' && b != '\\' && b != '<' && b != '>' && b != '&'
	}
	return t
}()

// appendString appends s as a JSON string, escaping as encoding/json does
// (control characters, \b and \f included since Go 1.22, quotes,
// backslashes, <, >, &, U+2028, U+2029) and replacing invalid UTF-8 with
// U+FFFD.
func appendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		b := s[i]
		if b < utf8.RuneSelf {
			if htmlSafe[b] {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '"', '\\':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[b>>4], hexDigits[b&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
