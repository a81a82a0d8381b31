package myagent

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/baton-run/baton/wsproto"
)

// obj is a JSON object as decoded with UseNumber.
type obj = map[string]any

// clientFrame is a myagent client's frame. Content may be any JSON value.
type clientFrame struct {
	Event       string          `json:"event"`
	SessionID   string          `json:"session_id"`
	StepID      string          `json:"step_id"`
	Content     json.RawMessage `json:"content"`
	Metadata    json.RawMessage `json:"metadata"`
	SignedState json.RawMessage `json:"signed_state"`
	LastSeq     json.RawMessage `json:"last_seq"`
	LastEventID json.RawMessage `json:"last_event_id"`
}

// decodeValue decodes raw (nil or null: nil) keeping numbers as json.Number.
func decodeValue(raw json.RawMessage) (any, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, nil
	}
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	return v, nil
}

// errBadInput is a client frame the dialect cannot translate.
var errBadInput = errors.New("bad input")

func badInput(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errBadInput, fmt.Sprintf(format, args...))
}

// batonFrame is a frame for /ws: {event, step_id?, content?, metadata}.
func batonFrame(event, stepID, content string, meta obj) []byte {
	f := obj{"event": event, "metadata": meta}
	if meta == nil {
		f["metadata"] = obj{}
	}
	if stepID != "" {
		f["step_id"] = stepID
	}
	if content != "" {
		f["content"] = content
	}
	b, _ := json.Marshal(f) // plain JSON values only
	return b
}

// idString is a task id of a client's task as Baton has it: a string, or
// an integer written in decimal.
func idString(v any) (string, bool) {
	switch id := v.(type) {
	case string:
		return id, id != ""
	case json.Number:
		if n, err := id.Int64(); err == nil {
			return strconv.FormatInt(n, 10), true
		}
	}
	return "", false
}

// idJSON is a Baton task id as myagent's clients know it: an integer when
// it is one, written canonically ("7", not "07"), else the string.
func idJSON(id string) any {
	if n, err := strconv.ParseInt(id, 10, 64); err == nil && strconv.FormatInt(n, 10) == id && n >= 0 {
		return json.Number(id)
	}
	return id
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

// toBatonTasks turns a myagent task list (a list, or one task object) into
// Baton's tasks: ids integer or string (missing: the 1-based position),
// title from title, name or objective, description from description or
// objective, depends_on from depends_on or dependencies. Baton validates
// the result (§5.1).
func toBatonTasks(v any) ([]wsproto.Task, error) {
	var list []any
	switch t := v.(type) {
	case []any:
		list = t
	case obj:
		list = []any{t}
	default:
		return nil, badInput("tasks must be a list of task objects")
	}
	out := make([]wsproto.Task, 0, len(list))
	for i, e := range list {
		m, ok := e.(obj)
		if !ok {
			return nil, badInput("task %d is not an object", i)
		}
		t := wsproto.Task{DependsOn: []string{}}
		if raw, present := m["id"]; present {
			if t.ID, ok = idString(raw); !ok {
				return nil, badInput("task %d: id must be a non-empty string or an integer", i)
			}
		} else {
			t.ID = strconv.Itoa(i + 1)
		}
		t.Title = firstString(m, "title", "name", "objective")
		t.Description = firstString(m, "description", "objective")
		deps, present := m["depends_on"]
		if !present {
			deps = m["dependencies"]
		}
		if deps != nil {
			dl, ok := deps.([]any)
			if !ok {
				return nil, badInput("task %d: dependencies must be a list", i)
			}
			for _, d := range dl {
				s, ok := idString(d)
				if !ok {
					return nil, badInput("task %d: a dependency must be a task id", i)
				}
				t.DependsOn = append(t.DependsOn, s)
			}
		}
		out = append(out, t)
	}
	return out, nil
}

func firstString(m obj, keys ...string) string {
	for _, k := range keys {
		if s := strings.TrimSpace(str(m[k])); s != "" {
			return s
		}
	}
	return ""
}

// mirrorTask is a Baton task (a decoded JSON object) as myagent's clients
// read it: Baton's fields, plus name/objective/dependencies, with integer
// ids as numbers.
func mirrorTask(t any) any {
	m, ok := t.(obj)
	if !ok {
		return t
	}
	out := obj{}
	for k, v := range m {
		out[k] = v
	}
	out["id"] = idJSON(str(m["id"]))
	out["name"] = m["title"]
	out["objective"] = m["description"]
	deps := []any{}
	if dl, ok := m["depends_on"].([]any); ok {
		for _, d := range dl {
			deps = append(deps, idJSON(str(d)))
		}
	}
	out["depends_on"], out["dependencies"] = deps, deps
	return out
}

func mirrorTasks(v any) []any {
	list, _ := v.([]any)
	out := make([]any, 0, len(list))
	for _, t := range list {
		out = append(out, mirrorTask(t))
	}
	return out
}

// Phases of a session as the dialect tracks them from Baton's events, for
// user.cancel_plan and user.replan.
const (
	phaseIdle        = "idle"
	phasePlanning    = "planning"
	phasePlanConfirm = "plan_confirm"
	phaseRunning     = "running"
)

// view is what the dialect knows of one session from the events it
// forwarded: enough to mirror payloads and to answer confirmations in
// Baton's shape. Only the session's reader changes it, under session.mu.
type view struct {
	id          string
	connID      string
	phase       string
	tasks       map[string]any // Baton task id → task object, of the run
	confirms    map[string]string
	lastSeq     uint64
	lastRequest string
}

func newView(id, connID string) *view {
	return &view{id: id, connID: connID, phase: phaseIdle, tasks: map[string]any{}, confirms: map[string]string{}}
}

func (v *view) remember(tasks any) {
	list, _ := tasks.([]any)
	for _, t := range list {
		if m, ok := t.(obj); ok {
			v.tasks[str(m["id"])] = m
		}
	}
}

// eventID is the event id the dialect gives a sequenced event:
// "<session_id>-<seq>", the shape myagent's server gives its own, so that
// an ack or a reconnect by last_event_id names its session and seq.
func eventID(session string, seq uint64) string {
	return session + "-" + strconv.FormatUint(seq, 10)
}

// parseEventID reverses eventID.
func parseEventID(id string) (session string, seq uint64, ok bool) {
	i := strings.LastIndexByte(id, '-')
	if i <= 0 {
		return "", 0, false
	}
	n, err := strconv.ParseUint(id[i+1:], 10, 64)
	if err != nil {
		return "", 0, false
	}
	return id[:i], n, true
}

// synthesized is a frame the dialect makes itself, unsequenced.
func (v *view) synthesized(event string, content any, meta obj) obj {
	if meta == nil {
		meta = obj{}
	}
	meta["connection_id"] = v.connID
	return obj{"event": event, "session_id": v.id, "content": content, "metadata": meta}
}

// translate turns one Baton frame into the frames a myagent client gets,
// updating v. It never fails: a frame it does not know passes unchanged
// but for the envelope (session_id, event_id, metadata.connection_id).
func (v *view) translate(f obj) []obj {
	event := str(f["event"])
	meta, _ := f["metadata"].(obj)
	if meta == nil {
		meta = obj{}
	}
	seq, _ := f["seq"].(json.Number)
	out := obj{"event": event, "session_id": v.id, "metadata": meta}
	if ts, ok := f["timestamp"].(string); ok {
		out["timestamp"] = ts
	}
	if s, err := strconv.ParseUint(string(seq), 10, 64); err == nil && s > 0 {
		out["seq"] = s
		out["event_id"] = eventID(v.id, s)
		meta["orig_event_id"] = f["event_id"]
		if s > v.lastSeq {
			v.lastSeq = s
		}
	}
	if sid := str(f["step_id"]); sid != "" {
		out["step_id"] = sid
	}
	meta["connection_id"] = v.connID
	out["content"] = f["content"]
	frames := []obj{out}
	runID := meta["run_id"]

	switch event {
	case wsproto.EventConnected: // only a resume's answer, which the dialect reads itself
		return nil
	case wsproto.EventStateSnapshot:
		if run, ok := meta["run"].(obj); ok {
			v.remember(run["tasks"])
		}
		switch str(meta["phase"]) {
		case wsproto.PhaseIdle:
			v.phase = phaseIdle
		case wsproto.PhasePlanning:
			v.phase = phasePlanning
		case wsproto.PhaseAwaitingConfirm:
			v.phase = phasePlanConfirm
		default:
			v.phase = phaseRunning
		}
	case wsproto.EventError:
		out["event"] = "agent.error"
		out["content"] = meta["message"]
	case wsproto.EventPlanStart:
		v.phase, v.tasks = phasePlanning, map[string]any{}
		content := obj{"question": meta["request"]}
		if fb, ok := meta["feedback"]; ok {
			content["feedback"] = fb
		}
		out["content"] = content
	case wsproto.EventPlanCompleted:
		v.remember(meta["tasks"])
		list, _ := meta["tasks"].([]any)
		meta["task_count"] = len(list)
		out["content"] = obj{"tasks": mirrorTasks(meta["tasks"]), "plan_summary": meta["plan_summary"]}
	case wsproto.EventPlanUpdated:
		v.remember(meta["tasks"])
		out["content"] = obj{"tasks": mirrorTasks(meta["tasks"]), "reason": meta["reason"]}
	case wsproto.EventUserConfirm:
		kind := str(meta["kind"])
		v.confirms[str(f["step_id"])] = kind
		meta["requires_confirmation"] = true
		switch kind {
		case wsproto.ConfirmPlan, wsproto.ConfirmAdjust:
			meta["scope"] = "plan"
			meta["tasks"] = mirrorTasks(meta["tasks"])
			if _, ok := meta["plan_summary"]; !ok {
				meta["plan_summary"] = ""
			}
			if kind == wsproto.ConfirmPlan {
				v.phase = phasePlanConfirm
			}
		case "tool_confirm":
			meta["scope"] = "tool"
			meta["tool_name"] = meta["tool"]
			meta["tool_description"] = fmt.Sprintf("%v wants to run %v", taskLabel(v, meta["task_id"]), meta["tool"])
			meta["tool_args"] = meta["arguments"]
		case wsproto.ConfirmTaskFailed:
			meta["scope"] = "task"
		default:
			meta["scope"] = "input"
		}
	case wsproto.EventSolverStart:
		v.phase = phaseRunning
		if t, ok := meta["task"]; ok { // a chat run's one task
			v.remember([]any{t})
		}
		out["content"] = obj{"task": v.task(meta["task_id"])}
	case wsproto.EventSolverProgress:
		out["content"] = obj{"task": v.task(meta["task_id"]), "progress": meta["progress"], "message": meta["message"]}
	case wsproto.EventSolverCompleted:
		summary := f["content"]
		out["content"] = obj{"task": v.task(meta["task_id"]), "summary": summary,
			"result": obj{"output": meta["result"], "summary": summary}}
	case wsproto.EventSolverCancelled, wsproto.EventSolverSkipped, wsproto.EventSolverRestarted:
		out["content"] = obj{"task": v.task(meta["task_id"]), "reason": meta["reason"]}
	case wsproto.EventAggregateCompleted:
		out["content"] = obj{"output": meta["summary"]}
	case wsproto.EventFinalAnswer:
		v.endRun()
	case wsproto.EventPipelineCancelled:
		v.endRun()
		frames = append(frames, v.synthesized("agent.interrupted", "Execution interrupted",
			obj{"run_id": runID, "reason": meta["reason"]}))
	case wsproto.EventPlanCancelled:
		v.endRun()
		switch reason := str(meta["reason"]); reason {
		case wsproto.ReasonUserReject, wsproto.ReasonConfirmTimeout:
			frames = append(frames, v.synthesized("agent.final_answer", "Plan was declined by user.",
				obj{"run_id": runID, "reason": reason}))
		default:
			msg := str(meta["error"])
			if msg == "" {
				msg = "planning failed"
			}
			frames = append(frames, v.synthesized("agent.error", msg, obj{"run_id": runID, "reason": reason}))
		}
	}
	return frames
}

// endRun forgets the run that ended: its tasks and confirmations.
func (v *view) endRun() {
	v.phase = phaseIdle
	v.tasks, v.confirms = map[string]any{}, map[string]string{}
}

// task is the task a solver event names, mirrored; {id} when the dialect
// never saw it (a resume that began mid-run).
func (v *view) task(id any) any {
	if t, ok := v.tasks[str(id)]; ok {
		return mirrorTask(t)
	}
	return obj{"id": idJSON(str(id))}
}

func taskLabel(v *view, id any) string {
	if t, ok := v.tasks[str(id)].(obj); ok && str(t["title"]) != "" {
		return fmt.Sprintf("task %q", str(t["title"]))
	}
	if str(id) != "" {
		return "task " + str(id)
	}
	return "the agent"
}

// response is a user.response's content as Baton wants it for the
// confirmation kind its step_id was asked with: {confirmed, tasks?} for
// plans, {approved} for tools, {action} for a failed task (confirmed:
// retry, else skip, unless content names an action), {text} for a
// question (content.text, .answer or .feedback; confirmed:false: "").
func toResponse(kind string, content any) (obj, error) {
	c, isObj := content.(obj)
	if b, ok := content.(bool); ok { // a bare true/false
		c, isObj = obj{"confirmed": b}, true
	}
	if !isObj {
		return nil, badInput("user.response content must be an object such as {\"confirmed\": true}")
	}
	confirmed, hasConfirmed := c["confirmed"].(bool)
	if _, ok := c["approved"].(bool); ok && !hasConfirmed {
		confirmed, hasConfirmed = c["approved"].(bool), true
	}
	switch kind {
	case "tool_confirm":
		if !hasConfirmed {
			return nil, badInput("user.response content needs confirmed: true or false")
		}
		return obj{"approved": confirmed}, nil
	case wsproto.ConfirmTaskFailed:
		if a := str(c["action"]); a != "" {
			return obj{"action": a}, nil
		}
		if !hasConfirmed {
			return nil, badInput("user.response content needs confirmed or action (retry, skip, abort)")
		}
		if confirmed {
			return obj{"action": "retry"}, nil
		}
		return obj{"action": "skip"}, nil
	case "input_request":
		text := firstString(c, "text", "answer", "feedback", "content")
		if hasConfirmed && !confirmed {
			text = ""
		}
		return obj{"text": text}, nil
	}
	if !hasConfirmed {
		return nil, badInput("user.response content needs confirmed: true or false")
	}
	out := obj{"confirmed": confirmed}
	if t, ok := c["tasks"]; ok && t != nil && confirmed {
		tasks, err := toBatonTasks(t)
		if err != nil {
			return nil, err
		}
		out["tasks"] = tasks
	}
	return out, nil
}

// toMessage is a user.message's content as Baton's user.message: the text,
// and mode/adaptive when a structured content gives them.
func toMessage(content any) (text string, meta obj, err error) {
	meta = obj{}
	switch c := content.(type) {
	case string:
		text = c
	case obj:
		text = firstString(c, "question", "content", "text", "message")
		for _, k := range []string{"mode", "adaptive"} {
			if v, ok := c[k]; ok {
				meta[k] = v
			}
		}
	default:
		return "", nil, badInput("user.message content must be a string or an object with question")
	}
	if strings.TrimSpace(text) == "" {
		return "", nil, badInput("Message content cannot be empty")
	}
	return text, meta, nil
}

// toSolve is a user.solve_tasks content ({tasks, question?, plan_summary?},
// a bare list, or one task) as Baton's tasks.
func toSolve(content any) ([]wsproto.Task, error) {
	if c, ok := content.(obj); ok {
		content = c["tasks"]
	}
	if content == nil {
		return nil, badInput("Missing tasks in user.solve_tasks content")
	}
	return toBatonTasks(content)
}

// ackOf reads an ack's cursor: content {last_seq} or {last_event_id}, a
// bare number or event id, or the same fields at the top level.
func ackOf(f *clientFrame, content any) (session string, seq uint64, err error) {
	fromID := func(v any) (string, uint64, bool) {
		s, ok := v.(string)
		if !ok {
			return "", 0, false
		}
		return parseEventID(s)
	}
	fromSeq := func(v any) (uint64, bool) {
		n, ok := v.(json.Number)
		if !ok {
			return 0, false
		}
		u, err := strconv.ParseUint(string(n), 10, 64)
		return u, err == nil
	}
	c, _ := content.(obj)
	for _, v := range []any{c["last_event_id"], content} {
		if s, n, ok := fromID(v); ok {
			return s, n, nil
		}
	}
	for _, v := range []any{c["last_seq"], content} {
		if n, ok := fromSeq(v); ok {
			return "", n, nil
		}
	}
	if top, _ := decodeValue(f.LastEventID); top != nil {
		if s, n, ok := fromID(top); ok {
			return s, n, nil
		}
	}
	if top, _ := decodeValue(f.LastSeq); top != nil {
		if n, ok := fromSeq(top); ok {
			return "", n, nil
		}
	}
	return "", 0, badInput("user.ack needs last_seq (a non-negative integer) or last_event_id")
}

// taskIDOf reads {task_id} (or a bare id) of cancel_task / restart_task.
func taskIDOf(content any) (string, error) {
	if c, ok := content.(obj); ok {
		content = c["task_id"]
	}
	if id, ok := idString(content); ok {
		return id, nil
	}
	return "", badInput("Missing task_id")
}
