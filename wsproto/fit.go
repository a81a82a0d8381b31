package wsproto

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"unicode/utf8"
)

// CutMarker ends every text cut to make a frame fit its size cap, as it
// ends a tool result cut at the tool result limit.
const CutMarker = " […]"

// cutKeys are the metadata fields holding free text — a model's, a tool's
// or a user's — that a frame may lose to fit its cap, at any depth (a
// plan's task descriptions, a todo item's content). Every string inside an
// "arguments" object may be cut too. Ids, kinds, statuses and every other
// field are never cut: a client needs them whole to follow the run.
var cutKeys = map[string]bool{
	"result": true, "message": true, "summary": true, "content": true, "plan_summary": true,
	"request": true, "feedback": true, "title": true, "description": true, "question": true,
	"context": true, "reason": true, "error": true, "last_error": true, "note": true,
}

// minKept is the least a cut text keeps, marker included: cutting further
// would leave nothing to read, and ids are never cut anyway.
const minKept = 64

// FitFrame appends f's encoding to dst in at most limit bytes. When the
// encoding is longer, the frame's long texts — its content, the metadata's
// free-text fields (result, message, summary, content, description, …) and
// every string of its arguments — are cut to one common length, the
// longest first, each ending in CutMarker, and the metadata gains
// "truncated": true and "original_bytes": the size of the encoding before.
// The Frame returned is the one encoded: f with its Content cut and its
// Metadata the cut metadata decoded into the event's type (DecodeMetadata),
// for a State to apply. fits is false when cutting every text to its
// minimum still leaves the frame too long (its bulk is not text); the frame
// is then as short as cutting makes it.
func FitFrame(dst []byte, f Frame, limit int) (b []byte, cut Frame, fits bool, err error) {
	start := len(dst)
	b, err = AppendFrame(dst, f)
	if err != nil || len(b)-start <= limit {
		return b, f, true, err
	}
	original := len(b) - start
	meta := map[string]any{}
	if f.Metadata != nil {
		raw, err := json.Marshal(f.Metadata)
		if err != nil {
			return dst, f, false, fmt.Errorf("cut %s: %w", f.Event, err)
		}
		d := json.NewDecoder(bytes.NewReader(raw))
		d.UseNumber() // numbers come out as they went in
		if err := d.Decode(&meta); err != nil {
			return dst, f, false, fmt.Errorf("cut %s: %w", f.Event, err)
		}
	}
	cut = f
	texts := []text{{s: f.Content, set: func(s string) { cut.Content = s }}}
	collectTexts(meta, false, &texts)
	for i := range texts {
		texts[i].enc = encodedLen(texts[i].s)
	}
	longest := 0
	for _, t := range texts {
		longest = max(longest, t.enc)
	}
	if longest <= minKept {
		return b, f, false, nil // nothing to cut
	}
	meta["truncated"] = true
	// A text cut where it entered (--max-result-bytes) already says how
	// long it was; the larger size stands.
	if n, _ := meta["original_bytes"].(json.Number); n == "" || mustInt(n) < int64(original) {
		meta["original_bytes"] = original
	}

	var raw []byte
	encode := func(keep int) error {
		for _, t := range texts {
			t.set(cutText(t.s, t.enc, keep))
		}
		if raw, err = json.Marshal(meta); err != nil {
			return fmt.Errorf("cut %s: %w", f.Event, err)
		}
		b = appendFrame(dst[:start], cut, raw)
		return nil
	}
	// The first cut is what the sizes say is enough, the marker's few
	// bytes included; the loop is for what they cannot foresee (a cut
	// that stops short of a rune, escapes JSON writes differently).
	const markerBytes = len(`,"original_bytes":,"truncated":true`) + 20
	keep := level(texts, longest, original-limit+markerBytes)
	for range 8 {
		if err := encode(keep); err != nil {
			return dst, f, false, err
		}
		over := len(b) - start - limit
		if over <= 0 || keep == minKept {
			break
		}
		keep = level(texts, keep, over)
	}
	if cut.Metadata, err = DecodeMetadata(f.Event, raw); err != nil {
		return dst, f, false, err
	}
	return b, cut, len(b)-start <= limit, nil
}

// mustInt is n as an int64, 0 when it is not one.
func mustInt(n json.Number) int64 {
	i, _ := n.Int64()
	return i
}

// text is a string a frame may lose the end of.
type text struct {
	s   string
	enc int // its encoded length, quotes left out
	set func(string)
}

// collectTexts gathers the strings of v that may be cut: under cutKeys,
// or any string when all is set (inside arguments).
func collectTexts(v any, all bool, out *[]text) {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if s, ok := x.(string); ok {
				if all || cutKeys[k] {
					*out = append(*out, text{s: s, set: func(s string) { v[k] = s }})
				}
				continue
			}
			collectTexts(x, all || k == "arguments", out)
		}
	case []any:
		for i, x := range v {
			if s, ok := x.(string); ok {
				if all {
					*out = append(*out, text{s: s, set: func(s string) { v[i] = s }})
				}
				continue
			}
			collectTexts(x, all, out)
		}
	}
}

// level returns the length every text longer than it is cut to so that
// the texts, cut to keep now, lose over more bytes: the largest such
// length, and never less than minKept.
func level(texts []text, keep, over int) int {
	lens := make([]int, 0, len(texts))
	for _, t := range texts {
		lens = append(lens, min(t.enc, keep))
	}
	sort.Sort(sort.Reverse(sort.IntSlice(lens)))
	sum := 0
	for k := 1; k <= len(lens); k++ {
		sum += lens[k-1]
		next := 0
		if k < len(lens) {
			next = lens[k]
		}
		// Cutting the k longest to l loses sum − k·l bytes.
		if l := (sum - over) / k; l >= next && sum-k*l >= over {
			return max(l, minKept)
		}
	}
	return minKept
}

// cutText returns s, whose encoded length is enc, cut to an encoded length
// of at most keep with CutMarker at its end; s itself when it fits.
func cutText(s string, enc, keep int) string {
	if enc <= keep {
		return s
	}
	budget := keep - len(CutMarker)
	n := 0
	for i, r := range s {
		if n += encodedRuneLen(r, s[i:]); n > budget {
			return s[:i] + CutMarker
		}
	}
	return s
}

// encodedLen is the length of s as appendString writes it, quotes left out.
func encodedLen(s string) int {
	n := 0
	for i, r := range s {
		n += encodedRuneLen(r, s[i:])
	}
	return n
}

// encodedRuneLen is how many bytes appendString writes for the rune r that
// starts rest.
func encodedRuneLen(r rune, rest string) int {
	switch {
	case r < utf8.RuneSelf:
		b := byte(r)
		switch {
		case b >= 0x20 && b != '"' && b != '\\' && b != '<' && b != '>' && b != '&':
			return 1
		case b == '"' || b == '\\' || b == '\b' || b == '\f' || b == '\n' || b == '\r' || b == '\t':
			return 2
		}
		return 6
	case r == utf8.RuneError:
		if _, size := utf8.DecodeRuneInString(rest); size == 1 {
			return 6 // invalid UTF-8, written as \ufffd
		}
		return 3
	case r == '\u2028' || r == '\u2029':
		return 6
	}
	return utf8.RuneLen(r)
}
