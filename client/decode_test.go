package client

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/baton-run/baton/wsproto"
)

// TestDecodeFrame: the hand decoder reads what encoding/json reads, in any
// key order and spacing, with escapes, nulls and unknown keys, and refuses
// what is not an object of the envelope's types.
func TestDecodeFrame(t *testing.T) {
	tests := []struct {
		name string
		in   string
		bad  bool
	}{
		{name: "the server's order", in: `{"event":"solver.progress","event_id":"e1","seq":7,"session_id":"s","step_id":"st",` +
			`"timestamp":"2026-01-02T03:04:05.123456789Z","content":"hi","metadata":{"run_id":"r","progress":0.5}}`},
		{name: "another order and spacing", in: " {\n\t\"metadata\" : { \"a\" : [1, {\"b\":\"}]\"}] } , \"seq\" : 12 ,\"event\":\"x\"\r\n}  "},
		{name: "escapes", in: `{"event":"a\"b","content":"line\nnext \u00e9 \\ \/","event_id":"\u0065"}`},
		{name: "nulls", in: `{"event":null,"seq":null,"timestamp":null,"content":null,"metadata":null}`},
		{name: "unknown keys", in: `{"extra":{"x":[1,2,{"y":"}"}]},"n":-1.5e3,"t":true,"event":"e","z":null}`},
		{name: "an offset timestamp", in: `{"timestamp":"2026-01-02T03:04:05+02:00"}`},
		{name: "empty", in: `{}`},
		{name: "not an object", in: `[1]`, bad: true},
		{name: "a string seq", in: `{"seq":"5"}`, bad: true},
		{name: "a negative seq", in: `{"seq":-5}`, bad: true},
		{name: "a fractional seq", in: `{"seq":5.0}`, bad: true},
		{name: "a number event", in: `{"event":5}`, bad: true},
		{name: "a bad timestamp", in: `{"timestamp":"yesterday"}`, bad: true},
		{name: "unterminated", in: `{"event":"x"`, bad: true},
		{name: "unterminated metadata", in: `{"metadata":{"a":[1}`, bad: true},
		{name: "a missing colon", in: `{"event" "x"}`, bad: true},
		{name: "trailing data", in: `{"event":"x"} {}`, bad: true},
		{name: "a trailing comma", in: `{"event":"x",}`, bad: true},
		{name: "no value", in: `{"event":}`, bad: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got Frame
			err := decodeFrame([]byte(tt.in), &got, interner{})
			if tt.bad {
				if err == nil {
					t.Fatalf("decoded %+v, want an error", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var want Frame
			if err := json.Unmarshal([]byte(tt.in), &want); err != nil {
				t.Fatal(err)
			}
			if fmt.Sprintf("%#v", got) != fmt.Sprintf("%#v", want) {
				t.Errorf("decoded\n%#v\nwant\n%#v", got, want)
			}
		})
	}
}

// FuzzDecodeFrame: every frame the server's encoder writes decodes back
// to its fields, and no input makes the decoder panic.
func FuzzDecodeFrame(f *testing.F) {
	f.Add("solver.progress", "e1", uint64(3), "s", "", "text \"quoted\" <b>\n", `{"run_id":"r"}`, []byte(`{"event":"x"}`))
	f.Add("", "", uint64(0), "", "step", "", `{}`, []byte(`{"metadata":{"a":"\"}"}}`))
	f.Fuzz(func(t *testing.T, event, id string, seq uint64, session, step, content, meta string, raw []byte) {
		var junk Frame
		decodeFrame(raw, &junk, interner{}) // must not panic

		if !json.Valid([]byte(meta)) || !strings.HasPrefix(strings.TrimSpace(meta), "{") {
			meta = `{}`
		}
		in := wsproto.Frame{Event: event, EventID: id, Seq: seq, SessionID: session, StepID: step,
			Timestamp: time.Unix(1700000000, 123456789).UTC(), Content: content, Metadata: json.RawMessage(meta)}
		b, err := wsproto.AppendFrame(nil, in)
		if err != nil {
			t.Skip()
		}
		var got, want Frame
		if err := decodeFrame(b, &got, interner{}); err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		if err := json.Unmarshal(b, &want); err != nil {
			t.Fatal(err)
		}
		if fmt.Sprintf("%#v", got) != fmt.Sprintf("%#v", want) {
			t.Errorf("%s: decoded\n%#v\nwant\n%#v", b, got, want)
		}
	})
}

func TestMetaString(t *testing.T) {
	tests := []struct {
		name, in string
		want     string
		ok       bool
	}{
		{"first", `{"run_id":"r1","x":1}`, "r1", true},
		{"after nested values", `{"a":{"run_id":"inner"},"b":[1,"]"],"run_id":"r2"}`, "r2", true},
		{"escaped", `{"run_id":"r\u0033"}`, "r3", true},
		{"absent", `{"a":{"run_id":"inner"}}`, "", false},
		{"not a string", `{"run_id":5}`, "", false},
		{"not an object", `null`, "", false},
		{"empty", `{}`, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := Frame{Metadata: json.RawMessage(tt.in)}.MetaString("run_id")
			if got != tt.want || ok != tt.ok {
				t.Errorf("MetaString = %q, %v; want %q, %v", got, ok, tt.want, tt.ok)
			}
		})
	}
}

func TestAppendAck(t *testing.T) {
	var got map[string]any
	if err := json.Unmarshal(appendAck(nil, 42), &got); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != "map[event:user.ack metadata:map[last_seq:42]]" {
		t.Errorf("ack %v", got)
	}
}

func BenchmarkDecodeFrame(b *testing.B) {
	frame := []byte(`{"event":"solver.progress","event_id":"0190a1b2-c3d4-7e5f-8a9b-000000000001","seq":17,` +
		`"session_id":"0190a1b2-c3d4-7e5f-8a9b-00000000000a","timestamp":"2026-01-02T03:04:05.123456789Z","content":"",` +
		`"metadata":{"run_id":"0190a1b2-c3d4-7e5f-8a9b-00000000000b","task_id":"a","attempt":1,"progress":0.5,"message":"working"}}`)
	names := interner{}
	for b.Loop() {
		var f Frame
		if err := decodeFrame(frame, &f, names); err != nil {
			b.Fatal(err)
		}
	}
}
