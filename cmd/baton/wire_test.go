package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/baton-run/baton/internal/asyncapitest"
	"github.com/baton-run/baton/internal/skipreport"
	"github.com/baton-run/baton/wsproto"
)

// Every frame of the end-to-end suite is checked against the protocol's
// machine-readable spec, docs/asyncapi.yaml: startServerCtx serves through
// an asyncapitest.Tap, and when the test ends checkWire validates every
// message the server and its clients exchanged, failing the test on the
// first frames that break the spec. wireSeen counts what was validated;
// when the whole suite has run, TestMain fails if the spec has an event
// (or a confirmation kind, or an error code) the suite never produced,
// unless notProduced says why it cannot.

var loadSpec = sync.OnceValues(func() (*asyncapitest.Spec, error) {
	return asyncapitest.Load("../../docs/asyncapi.yaml")
})

// notProduced are the spec's variants the end-to-end suite cannot produce.
var notProduced = map[string]string{}

// reporter is the part of testing.TB checkWire reports to.
type reporter interface {
	Helper()
	Errorf(format string, args ...any)
}

// maxWireErrors bounds the frames one test reports: the first say it all.
const maxWireErrors = 5

// checkWire validates every message recorded by tap: a server frame must
// match its event's message in the spec; a client frame the spec allows
// must be one the server decodes (frames the spec refuses are the tests'
// deliberately bad ones, answered with system.error).
func checkWire(r reporter, tap *asyncapitest.Tap, seen *tally) {
	r.Helper()
	spec, err := loadSpec()
	if err != nil {
		r.Errorf("docs/asyncapi.yaml: %v", err)
		return
	}
	fromClient, fromServer, err := tap.Messages()
	if err != nil {
		r.Errorf("the WebSocket stream: %v", err)
		return
	}
	bad := 0
	report := func(format string, args ...any) {
		r.Helper()
		if bad++; bad <= maxWireErrors {
			r.Errorf(format, args...)
		}
	}
	for _, m := range fromServer {
		if m.Binary {
			report("connection %d: a binary frame from the server: %q", m.Conn, m.Data)
			continue
		}
		event, err := spec.Validate(asyncapitest.FromServer, m.Data)
		if err != nil {
			report("connection %d: a server frame breaks docs/asyncapi.yaml: %v\nframe: %s", m.Conn, err, m.Data)
			continue
		}
		seen.server(event, m.Data)
	}
	for _, m := range fromClient {
		if m.Binary {
			seen.offSpec()
			continue
		}
		event, err := spec.Validate(asyncapitest.FromClient, m.Data)
		if err != nil {
			seen.offSpec()
			continue
		}
		if _, e := wsproto.DecodeText(m.Data); e != nil {
			report("connection %d: docs/asyncapi.yaml allows a frame the server refuses (%s: %s): %s", m.Conn, e.Code, e.Message, m.Data)
			continue
		}
		seen.client(event)
	}
	if bad > maxWireErrors {
		r.Errorf("… and %d more frames that break docs/asyncapi.yaml", bad-maxWireErrors)
	}
}

// tally counts the frames checkWire validated, by event and by variant.
type tally struct {
	mu         sync.Mutex // guards the fields below
	fromServer map[string]int
	fromClient map[string]int
	variants   map[string]int // "agent.user_confirm kind=…", "system.error code=…"
	refused    int            // client frames the spec refuses (binary ones included)
}

var wireSeen = newTally()

func newTally() *tally {
	return &tally{fromServer: map[string]int{}, fromClient: map[string]int{}, variants: map[string]int{}}
}

func (t *tally) server(event string, frame []byte) {
	var f struct {
		Metadata struct {
			Kind string `json:"kind"`
			Code string `json:"code"`
		} `json:"metadata"`
	}
	json.Unmarshal(frame, &f) // valid against the spec, so valid JSON
	t.mu.Lock()
	defer t.mu.Unlock()
	t.fromServer[event]++
	switch event {
	case wsproto.EventUserConfirm:
		t.variants[event+" kind="+f.Metadata.Kind]++
	case wsproto.EventError:
		t.variants[event+" code="+f.Metadata.Code]++
	}
}

func (t *tally) client(event string) { t.mu.Lock(); t.fromClient[event]++; t.mu.Unlock() }
func (t *tally) offSpec()            { t.mu.Lock(); t.refused++; t.mu.Unlock() }

// variantsOf lists what the spec says the suite should see: every event
// both ways, every confirmation kind and every error code.
func variantsOf(spec *asyncapitest.Spec) (fromServer, fromClient, variants []string) {
	for _, c := range spec.Lookup("/components/schemas/ErrorCode/enum").([]any) {
		variants = append(variants, wsproto.EventError+" code="+c.(string))
	}
	for _, k := range spec.Lookup("/components/schemas/UserConfirmMetadata/oneOf").([]any) {
		ref := strings.TrimPrefix(k.(map[string]any)["$ref"].(string), "#")
		variants = append(variants, wsproto.EventUserConfirm+" kind="+spec.Lookup(ref+"/properties/kind/const").(string))
	}
	return spec.Events(asyncapitest.FromServer), spec.Events(asyncapitest.FromClient), variants
}

// covered writes what was validated and returns an error naming what the
// spec has and the suite never produced (beyond notProduced), or what
// notProduced excuses and the suite produced after all.
func (t *tally) covered(w io.Writer, spec *asyncapitest.Spec) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	serverEvents, clientEvents, variants := variantsOf(spec)
	total := func(m map[string]int) (n int) {
		for _, v := range m {
			n += v
		}
		return n
	}
	fmt.Fprintf(w, "docs/asyncapi.yaml: validated %d server frames (%d events), %d client frames (%d events); %d client frames off the spec (deliberately bad)\n",
		total(t.fromServer), len(t.fromServer), total(t.fromClient), len(t.fromClient), t.refused)
	var missing, stale []string
	check := func(key string, n int) {
		_, excused := notProduced[key]
		switch {
		case n == 0 && !excused:
			missing = append(missing, key)
		case n > 0 && excused:
			stale = append(stale, key)
		}
	}
	for _, e := range serverEvents {
		fmt.Fprintf(w, "  ← %-26s %6d\n", e, t.fromServer[e])
		check(e, t.fromServer[e])
	}
	for _, e := range clientEvents {
		fmt.Fprintf(w, "  → %-26s %6d\n", e, t.fromClient[e])
		check(e, t.fromClient[e])
	}
	for _, v := range variants {
		fmt.Fprintf(w, "    %-38s %6d\n", v, t.variants[v])
		check(v, t.variants[v])
	}
	var problems []string
	if len(missing) > 0 {
		problems = append(problems, "the end-to-end suite never produced "+strings.Join(missing, ", ")+
			" (add a test that does, or a reason to notProduced in cmd/baton/wire_test.go)")
	}
	if len(stale) > 0 {
		problems = append(problems, "notProduced excuses "+strings.Join(stale, ", ")+", which the suite produced")
	}
	if problems != nil {
		return fmt.Errorf("docs/asyncapi.yaml coverage: %s", strings.Join(problems, "; "))
	}
	return nil
}

// wholeSuite reports whether the test binary ran every test, the only case
// where a variant never seen means the suite cannot produce it. A test
// skipped for a missing program (the MCP tests, the only ones that meet a
// tool_confirm, without node and npm; the Redis tests without
// redis-server) makes the suite not whole either; under CI those fail
// instead (internal/skipreport).
func wholeSuite() bool {
	value := func(name string) string {
		if f := flag.Lookup(name); f != nil {
			return f.Value.String()
		}
		return ""
	}
	if value("test.run") != "" || value("test.skip") != "" || value("test.short") == "true" {
		return false
	}
	return !skipreport.Any()
}
