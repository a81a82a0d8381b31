package asyncapitest

import (
	"context"
	"encoding/binary"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// The document loads, every message has a payload schema, and every example
// it gives passes its own message's schema.
func TestDocsSpec(t *testing.T) {
	s, err := Load("../../docs/asyncapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Events(FromClient)) == 0 || len(s.Events(FromServer)) == 0 {
		t.Fatalf("events: client %v, server %v", s.Events(FromClient), s.Events(FromServer))
	}
	exs, err := s.Examples()
	if err != nil || len(exs) == 0 {
		t.Fatalf("examples: %d, %v", len(exs), err)
	}
	for _, ex := range exs {
		t.Run(ex.Message, func(t *testing.T) {
			if _, err := s.Validate(ex.Direction, ex.Payload); err != nil {
				t.Errorf("example of %s: %v", ex.Message, err)
			}
		})
	}
}

func TestLoadErrors(t *testing.T) {
	tests := []struct{ name, doc, want string }{
		{"no operations", "asyncapi: 3.0.0\n", "no operations"},
		{"unknown action", "operations:\n  x: {action: publish}\n", "action"},
		{"dangling $ref", "operations:\n  x: {action: send, messages: [{$ref: '#/nowhere'}]}\n", "leads nowhere"},
		{"unnamed message", "operations:\n  x: {action: send, messages: [{$ref: '#/m'}]}\nm: {payload: {}}\n", "no name"},
		{"not YAML", "operations: [\n", "parse"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := t.TempDir() + "/asyncapi.yaml"
			if err := os.WriteFile(path, []byte(tt.doc), 0o644); err != nil {
				t.Fatal(err)
			}
			if _, err := Load(path); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Load: %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

// wsFrame builds one WebSocket frame; a non-nil key masks it.
func wsFrame(first byte, payload string, key []byte) []byte {
	b := []byte{first}
	n := len(payload)
	var mask byte
	if key != nil {
		mask = 0x80
	}
	switch {
	case n < 126:
		b = append(b, mask|byte(n))
	case n < 1<<16:
		b = append(b, mask|126)
		b = binary.BigEndian.AppendUint16(b, uint16(n))
	default:
		b = append(b, mask|127)
		b = binary.BigEndian.AppendUint64(b, uint64(n))
	}
	p := []byte(payload)
	if key != nil {
		b = append(b, key...)
		for i := range p {
			p[i] ^= key[i%4]
		}
	}
	return append(b, p...)
}

func TestSplitMessages(t *testing.T) {
	key := []byte{1, 2, 3, 4}
	long := strings.Repeat("x", 70000)
	cat := func(frames ...[]byte) []byte {
		var b []byte
		for _, f := range frames {
			b = append(b, f...)
		}
		return b
	}
	tests := []struct {
		name    string
		stream  []byte
		masked  bool
		want    []Message
		wantErr string
	}{
		{"text and binary", cat(wsFrame(0x81, `{"a":1}`, nil), wsFrame(0x82, "\x00\x01", nil)), false,
			[]Message{{Data: []byte(`{"a":1}`)}, {Binary: true, Data: []byte("\x00\x01")}}, ""},
		{"masked client frames", cat(wsFrame(0x81, "hello", key), wsFrame(0x81, long, key)), true,
			[]Message{{Data: []byte("hello")}, {Data: []byte(long)}}, ""},
		{"16-bit length", wsFrame(0x81, strings.Repeat("y", 300), nil), false, []Message{{Data: []byte(strings.Repeat("y", 300))}}, ""},
		{"fragments around a ping", cat(wsFrame(0x01, "frag", nil), wsFrame(0x89, "ping", nil), wsFrame(0x80, "ment", nil)), false,
			[]Message{{Data: []byte("fragment")}}, ""},
		{"cut short", cat(wsFrame(0x81, "whole", nil), wsFrame(0x81, "cut", nil)[:4]), false, []Message{{Data: []byte("whole")}}, ""},
		{"cut in the length", cat(wsFrame(0x81, "whole", nil), []byte{0x81, 126, 1}), false, []Message{{Data: []byte("whole")}}, ""},
		{"nothing after close", cat(wsFrame(0x81, "a", nil), wsFrame(0x88, "\x03\xe8", nil), wsFrame(0x81, "b", nil)), false,
			[]Message{{Data: []byte("a")}}, ""},
		{"compressed", wsFrame(0xC1, "x", nil), false, nil, "reserved bits"},
		{"server frame masked", wsFrame(0x81, "x", key), false, nil, "mask"},
		{"client frame unmasked", wsFrame(0x81, "x", nil), true, nil, "mask"},
		{"stray continuation", wsFrame(0x80, "x", nil), false, nil, "continuation"},
		{"message inside a message", cat(wsFrame(0x01, "x", nil), wsFrame(0x81, "y", nil)), false, nil, "inside"},
		{"reserved opcode", wsFrame(0x83, "x", nil), false, nil, "opcode"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := splitMessages(tt.stream, tt.masked)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("splitMessages: %v, want an error containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("splitMessages = %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

// A Tap sees what crossed a real connection, both ways, and changes nothing
// of it: messages, their kind, and the close code.
func TestTap(t *testing.T) {
	tap := new(Tap)
	srv := httptest.NewServer(tap.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		ws.SetReadLimit(1 << 20)
		ctx := r.Context()
		for {
			typ, b, err := ws.Read(ctx)
			if err != nil {
				return
			}
			if string(b) == "bye" {
				ws.Close(4000, "bye")
				return
			}
			ws.Write(ctx, typ, append([]byte("echo "), b...))
		}
	})))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	ws.SetReadLimit(1 << 20)
	sent := []Message{{Data: []byte(`{"event":"user.cancel"}`)}, {Binary: true, Data: []byte{0, 1, 2}}, {Data: []byte(strings.Repeat("z", 100000))}}
	for _, m := range sent {
		typ := websocket.MessageText
		if m.Binary {
			typ = websocket.MessageBinary
		}
		if err := ws.Write(ctx, typ, m.Data); err != nil {
			t.Fatal(err)
		}
		if _, _, err := ws.Read(ctx); err != nil {
			t.Fatal(err)
		}
	}
	ws.Write(ctx, websocket.MessageText, []byte("bye"))
	if _, _, err := ws.Read(ctx); websocket.CloseStatus(err) != 4000 {
		t.Fatalf("close: %v, want 4000", err)
	}
	fromClient, fromServer, err := tap.Messages()
	if err != nil {
		t.Fatal(err)
	}
	wantClient := append(append([]Message(nil), sent...), Message{Data: []byte("bye")})
	var wantServer []Message
	for _, m := range sent {
		wantServer = append(wantServer, Message{Binary: m.Binary, Data: append([]byte("echo "), m.Data...)})
	}
	if !reflect.DeepEqual(fromClient, wantClient) {
		t.Errorf("client messages: %d, want %d", len(fromClient), len(wantClient))
	}
	if !reflect.DeepEqual(fromServer, wantServer) {
		t.Errorf("server messages: %d, want %d", len(fromServer), len(wantServer))
	}
}
