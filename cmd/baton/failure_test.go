package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/baton-run/baton/client"
	"github.com/baton-run/baton/wsproto"
)

func failTask(id, directive string, deps ...string) wsproto.Task {
	if deps == nil {
		deps = []string{}
	}
	return wsproto.Task{ID: id, Title: "Task " + id, Description: directive, DependsOn: deps}
}

// story renders a task's events compactly: "start a1", "fail a1 network
// retry", "retry a1/3", "done a3", "recovered a3", "gaveup a4", "ask a", …
func story(t *testing.T, frames []client.Frame) []string {
	t.Helper()
	var out []string
	for _, f := range frames {
		switch f.Event {
		case wsproto.EventSolverStart:
			m := meta[wsproto.SolverStart](t, f)
			out = append(out, fmt.Sprintf("start %s%d", m.TaskID, m.Attempt))
		case wsproto.EventExecutionError:
			m := meta[wsproto.ExecutionError](t, f)
			who := m.TaskID
			if m.Stage == "plan" {
				who = "plan"
			}
			out = append(out, fmt.Sprintf("fail %s%d %s %s", who, m.Attempt, m.ErrorType, m.SuggestedAction))
		case wsproto.EventRecoveryStarted:
			m := meta[wsproto.RecoveryStarted](t, f)
			who := m.TaskID
			if m.Stage == "plan" {
				who = "plan"
			}
			out = append(out, fmt.Sprintf("retry %s%d/%d", who, m.Attempt, m.MaxAttempts))
		case wsproto.EventSolverCompleted:
			m := meta[wsproto.SolverCompleted](t, f)
			out = append(out, fmt.Sprintf("done %s%d", m.TaskID, m.Attempt))
		case wsproto.EventRecoverySuccess:
			m := meta[wsproto.RecoverySuccess](t, f)
			out = append(out, fmt.Sprintf("recovered %s%d", m.TaskID, m.Attempt))
		case wsproto.EventRecoveryFailed:
			m := meta[wsproto.RecoveryFailed](t, f)
			out = append(out, fmt.Sprintf("gaveup %s %d", m.TaskID, m.Attempts))
		case wsproto.EventUserConfirm:
			m := meta[wsproto.UserConfirm](t, f)
			if m.Kind == wsproto.ConfirmPlan {
				out = append(out, "ask plan")
			} else {
				out = append(out, "ask "+m.TaskID)
			}
		case wsproto.EventSolverSkipped:
			m := meta[wsproto.SolverSkipped](t, f)
			out = append(out, fmt.Sprintf("skipped %s after %s", m.TaskID, m.Dependency))
		case wsproto.EventSolverCancelled:
			m := meta[wsproto.SolverCancelled](t, f)
			out = append(out, fmt.Sprintf("cancelled %s %s", m.TaskID, m.Reason))
		case wsproto.EventPipelineCompleted:
			out = append(out, "end "+meta[wsproto.PipelineCompleted](t, f).Status)
		case wsproto.EventPipelineCancelled:
			out = append(out, "cancelled run "+meta[wsproto.PipelineCancelled](t, f).Reason)
		case wsproto.EventPlanCompleted:
			out = append(out, "planned")
		case wsproto.EventPlanCancelled:
			out = append(out, "plan cancelled "+meta[wsproto.PlanCancelled](t, f).Reason)
		}
	}
	return out
}

// answerTaskFailed reads to the next task_failed question and answers it.
func answerTaskFailed(t *testing.T, c *conn, action string) (wsproto.UserConfirm, []client.Frame) {
	t.Helper()
	frames := c.until(wsproto.EventUserConfirm)
	f := frames[len(frames)-1]
	m := meta[wsproto.UserConfirm](t, f)
	if m.Kind != wsproto.ConfirmTaskFailed || f.StepID != m.StepID || strings.Join(m.Options, ",") != "retry,skip,abort" || m.ExpiresAt.IsZero() {
		t.Fatalf("task_failed confirmation %s", f.Metadata)
	}
	if action != "" {
		c.respond(m.StepID, map[string]any{"action": action})
	}
	return m, frames
}

func TestFailureAndRecovery(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		args  []string
		tasks []wsproto.Task
		drive func(t *testing.T, c *conn) []client.Frame
		want  []string
	}{
		{
			name:  "retry then success",
			tasks: []wsproto.Task{failTask("a", "[sim:fail=network*2]")},
			want:  []string{"start a1", "fail a1 network retry", "retry a1/3", "start a2", "fail a2 network retry", "retry a2/3", "start a3", "done a3", "recovered a3", "end succeeded"},
		},
		{
			name:  "permanent is not retried; skip gives partial",
			tasks: []wsproto.Task{failTask("a", "[sim:fail=permanent*1]"), failTask("b", "", "a"), failTask("c", "[sim:sleep=30ms]")},
			drive: func(t *testing.T, c *conn) []client.Frame {
				_, frames := answerTaskFailed(t, c, "skip")
				return append(frames, c.until(wsproto.EventFinalAnswer)...)
			},
			want: []string{"start a1", "start c1", "fail a1 permanent abort", "gaveup a 1", "ask a", "skipped b after a", "done c1", "end partial"},
		},
		{
			name:  "retries exhausted, then retry with a fresh budget",
			tasks: []wsproto.Task{failTask("a", "[sim:fail=timeout*4]")},
			drive: func(t *testing.T, c *conn) []client.Frame {
				_, frames := answerTaskFailed(t, c, "retry")
				return append(frames, c.until(wsproto.EventFinalAnswer)...)
			},
			want: []string{"start a1", "fail a1 timeout retry", "retry a1/3", "start a2", "fail a2 timeout retry", "retry a2/3",
				"start a3", "fail a3 timeout retry", "retry a3/3", "start a4", "fail a4 timeout retry", "gaveup a 4", "ask a",
				"start a5", "done a5", "end succeeded"},
		},
		{
			name:  "abort cancels the run",
			tasks: []wsproto.Task{failTask("a", "[sim:fail=permanent*1]"), failTask("slow", "[sim:sleep=1h]")},
			drive: func(t *testing.T, c *conn) []client.Frame {
				_, frames := answerTaskFailed(t, c, "abort")
				return append(frames, c.until(wsproto.EventPipelineCancelled)...)
			},
			want: []string{"start a1", "start slow1", "fail a1 permanent abort", "gaveup a 1", "ask a", "cancelled slow pipeline_cancelled", "cancelled run user_abort"},
		},
		{
			name:  "no answer counts as skip",
			args:  []string{"--confirm-timeout", "50ms"},
			tasks: []wsproto.Task{failTask("a", "[sim:fail=permanent*1]"), failTask("b", "", "a")},
			want:  []string{"start a1", "fail a1 permanent abort", "gaveup a 1", "ask a", "skipped b after a", "end failed"},
		},
		{
			name:  "user.cancel_task during a backoff wait",
			args:  []string{"--retry-base", "1h"},
			tasks: []wsproto.Task{failTask("a", "[sim:fail=network*1]"), failTask("b", "", "a"), failTask("c", "")},
			drive: func(t *testing.T, c *conn) []client.Frame {
				frames := c.until(wsproto.EventRecoveryStarted)
				c.send("user.cancel_task", map[string]any{"task_id": "a"})
				return append(frames, c.until(wsproto.EventFinalAnswer)...)
			},
			want: []string{"start a1", "start c1", "fail a1 network retry", "retry a1/3", "done c1", "cancelled a user_cancel_task", "skipped b after a", "end partial"},
		},
		{
			name:  "user.cancel during a backoff wait",
			args:  []string{"--retry-base", "1h"},
			tasks: []wsproto.Task{failTask("a", "[sim:fail=network*1]")},
			drive: func(t *testing.T, c *conn) []client.Frame {
				frames := c.until(wsproto.EventRecoveryStarted)
				c.send("user.cancel", nil)
				return append(frames, c.until(wsproto.EventPipelineCancelled)...)
			},
			want: []string{"start a1", "fail a1 network retry", "retry a1/3", "cancelled a pipeline_cancelled", "cancelled run user_cancel"},
		},
		{
			name:  "a task longer than --task-timeout fails as timeout",
			args:  []string{"--task-timeout", "20ms", "--max-retries", "1"},
			tasks: []wsproto.Task{failTask("a", "[sim:sleep=1h]")},
			want:  []string{"start a1", "fail a1 timeout retry", "retry a1/1", "start a2", "fail a2 timeout retry", "gaveup a 2", "ask a", "end failed"},
			drive: func(t *testing.T, c *conn) []client.Frame {
				_, frames := answerTaskFailed(t, c, "skip")
				return append(frames, c.until(wsproto.EventFinalAnswer)...)
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			base := startServer(t, append([]string{"--retry-base", "1ms"}, tt.args...)...)
			c, _ := connect(t, base)
			c.send("user.solve_tasks", map[string]any{"tasks": tt.tasks})
			var frames []client.Frame
			if tt.drive != nil {
				frames = tt.drive(t, c)
			} else {
				frames = c.until(wsproto.EventFinalAnswer)
			}
			checkStream(t, frames, 1)
			got := story(t, frames)
			// Independent tasks interleave: compare each task's own story.
			for _, id := range []string{"a", "b", "c", "slow"} {
				if g, w := only(got, id), only(tt.want, id); strings.Join(g, "|") != strings.Join(w, "|") {
					t.Errorf("task %s:\n got %q\nwant %q\n(all %q)", id, g, w, got)
				}
			}
			if g, w := got[len(got)-1], tt.want[len(tt.want)-1]; g != w {
				t.Errorf("ends with %q, want %q", g, w)
			}
		})
	}
}

// only keeps the story lines about one task.
func only(lines []string, id string) []string {
	var out []string
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) < 2 {
			continue
		}
		subject := strings.TrimRight(f[1], "0123456789")
		if f[0] == "skipped" || f[0] == "gaveup" || f[0] == "ask" || (f[0] == "cancelled" && f[1] != "run") {
			subject = f[1]
		}
		if subject == id {
			out = append(out, l)
		}
	}
	return out
}

func TestRetryDelays(t *testing.T) {
	t.Parallel()
	base := startServer(t, "--retry-base", "1s")
	c, _ := connect(t, base)
	c.send("user.solve_tasks", map[string]any{"tasks": []wsproto.Task{
		failTask("v", "[sim:fail=validation*1]"),
		failTask("r", "[sim:fail=rate_limit*1][sim:retry_after=40ms]"),
	}})
	delays := map[string]int64{}
	for _, f := range c.until(wsproto.EventFinalAnswer) {
		if f.Event == wsproto.EventRecoveryStarted {
			m := meta[wsproto.RecoveryStarted](t, f)
			delays[m.TaskID] = m.DelayMS
		}
	}
	if delays["v"] != 0 || delays["r"] != 40 {
		t.Errorf("delays %v: want validation 0 and the rate limit's Retry-After of 40ms", delays)
	}
}

// TestRetryAfterIsCapped: a model's Retry-After of a day is waited 30 s
// at most (the backoff cap), in planning and in a task; the wait still ends
// at once on a cancel.
func TestRetryAfterIsCapped(t *testing.T) {
	t.Parallel()
	base := startServer(t)
	tests := []struct {
		name  string
		start func(c *conn)
		stage string
	}{
		{"planning", func(c *conn) { c.message("Plan it [sim:plan_fail=rate_limit*1] [sim:retry_after=24h]") }, "plan"},
		{"a task", func(c *conn) {
			c.send("user.solve_tasks", map[string]any{"tasks": []wsproto.Task{
				failTask("r", "[sim:fail=rate_limit*1][sim:retry_after=24h]")}})
		}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, _ := connect(t, base)
			tt.start(c)
			frames := c.until(wsproto.EventRecoveryStarted)
			m := meta[wsproto.RecoveryStarted](t, frames[len(frames)-1])
			if m.Stage != tt.stage || m.DelayMS != 30_000 {
				t.Errorf("error.recovery_started %+v: want stage %q and delay_ms 30000", m, tt.stage)
			}
			c.send("user.cancel", nil)
			c.until(wsproto.EventPipelineCancelled)
		})
	}
}

// TestTwoPendingDecisions: two tasks fail at once; each waits on its own
// question, and the state snapshot shows both.
func TestTwoPendingDecisions(t *testing.T) {
	t.Parallel()
	base := startServer(t)
	c, hello := connect(t, base)
	c.send("user.solve_tasks", map[string]any{"tasks": []wsproto.Task{
		failTask("a", "[sim:fail=permanent*1]"), failTask("b", "[sim:fail=permanent*1]"), failTask("c", "", "a", "b")}})
	first, _ := answerTaskFailed(t, c, "")
	second, _ := answerTaskFailed(t, c, "")
	if first.StepID == second.StepID || first.TaskID == second.TaskID {
		t.Fatalf("two questions expected: %+v %+v", first, second)
	}
	// A resync shows both open.
	r := resume(t, base, hello, 1<<40, "")
	r.expect(wsproto.EventConnected)
	snap := meta[wsproto.Snapshot](t, r.expect(wsproto.EventStateSnapshot))
	if len(snap.Run.PendingConfirm) != 2 || snap.Phase != wsproto.PhaseSolving {
		t.Fatalf("snapshot pending %+v phase %s", snap.Run.PendingConfirm, snap.Phase)
	}
	r.respond(first.StepID, map[string]any{"action": "retry"})
	r.respond(second.StepID, map[string]any{"action": "dance"})
	frames := r.until(wsproto.EventError) // the retried task's events may come first
	if e := meta[wsproto.Error](t, frames[len(frames)-1]); e.Code != "invalid_message" {
		t.Fatalf("error %+v, want invalid_message", e)
	}
	r.respond(second.StepID, map[string]any{"action": "skip"})
	got := story(t, append(frames, r.until(wsproto.EventFinalAnswer)...))
	want := fmt.Sprintf("start %s2", first.TaskID)
	if !strings.Contains(strings.Join(got, "|"), want) || got[len(got)-1] != "end partial" {
		t.Errorf("after answers: %q, want %q and a partial end", got, want)
	}
}

func TestPlanningFailures(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		request string
		want    []string
	}{
		{"recovered", "Plan it [sim:plan_fail=network*1]", []string{"fail plan1 network retry", "retry plan1/3", "planned", "ask plan"}},
		{"exhausted", "Plan it [sim:plan_fail=rate_limit*9]", []string{"fail plan1 rate_limit retry", "retry plan1/3",
			"fail plan2 rate_limit retry", "retry plan2/3", "fail plan3 rate_limit retry", "retry plan3/3", "fail plan4 rate_limit retry", "plan cancelled plan_failed"}},
		{"permanent", "Plan it [sim:plan_fail=permanent*1]", []string{"fail plan1 permanent abort", "plan cancelled plan_failed"}},
	}
	base := startServer(t, "--retry-base", "1ms")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, _ := connect(t, base)
			c.message(tt.request)
			frames := c.until(wsproto.EventUserConfirm, wsproto.EventPlanCancelled)
			if got := story(t, frames); strings.Join(got, "|") != strings.Join(tt.want, "|") {
				t.Errorf("got %q\nwant %q", got, tt.want)
			}
			for _, f := range frames {
				if f.Event == wsproto.EventExecutionError && strings.Contains(string(f.Metadata), `"task_id"`) {
					t.Errorf("a planning error names a task: %s", f.Metadata)
				}
			}
		})
	}
}

// TestAnswerExplainsTotalFailure: when no task completed, the final answer
// says which tasks failed with which category, and which were skipped or
// cancelled.
func TestAnswerExplainsTotalFailure(t *testing.T) {
	t.Parallel()
	base := startServer(t, "--retry-base", "1ms", "--max-retries", "1")
	c, _ := connect(t, base)
	c.send("user.solve_tasks", map[string]any{"tasks": []wsproto.Task{
		failTask("a", "[sim:fail=permanent*1]"), failTask("b", "[sim:fail=network*9]"), failTask("c", "", "a", "b"), failTask("d", "[sim:sleep=1h]")}})
	seen := map[string]bool{}
	var frames []client.Frame
	for len(seen) < 2 { // a and b each ask; d is cancelled once both are answered
		m, fs := answerTaskFailed(t, c, "")
		frames = append(frames, fs...)
		seen[m.TaskID] = true
		if len(seen) == 2 {
			c.send("user.cancel_task", map[string]any{"task_id": "d"})
		}
		c.respond(m.StepID, map[string]any{"action": "skip"})
	}
	frames = append(frames, c.until(wsproto.EventFinalAnswer)...)
	done := meta[wsproto.PipelineCompleted](t, frames[len(frames)-2])
	if done.Status != wsproto.StatusFailed || done.Failed != 2 || done.Skipped != 1 || done.Cancelled != 1 {
		t.Errorf("pipeline.completed %+v", done)
	}
	answer := meta[wsproto.FinalAnswer](t, frames[len(frames)-1]).Content
	for _, want := range []string{
		"No task completed for your tasks (2 failed, 1 skipped, 1 cancelled).",
		"- Task a (a): failed: simulated failure of execution 1 (the first 1 fail) (permanent)",
		"- Task b (b): failed: simulated failure of execution 2 (the first 9 fail) (network)",
		"- Task c (c): skipped, because a, b did not complete",
		"- Task d (d): cancelled",
	} {
		if !strings.Contains(answer, want) {
			t.Errorf("the answer lacks %q:\n%s", want, answer)
		}
	}
	for _, f := range frames {
		if f.Event == wsproto.EventAggregateProgress {
			t.Errorf("aggregate.progress in a run with nothing to aggregate: %s", f.Metadata)
		}
	}
}

// TestMaxRetries: --max-retries N (or its old name, --max-attempts) is N
// retries after the first execution, of a task and of the planning, and
// the events say so as the contract counts: error.recovery_started names
// retry k of max_attempts N, and error.recovery_failed counts N+1
// executions.
func TestMaxRetries(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		flag string
		n    int
	}{{"--max-retries", 1}, {"--max-retries", 2}, {"--max-retries", 3}, {"--max-attempts", 2}} {
		t.Run(fmt.Sprint(tt.flag, tt.n), func(t *testing.T) {
			t.Parallel()
			n := tt.n
			base := startServer(t, "--retry-base", "1ms", tt.flag, fmt.Sprint(n))
			paths := []struct {
				name  string
				start func(c *conn)
				who   string
				until string
				last  []string
			}{
				{name: "a task", who: "a", until: wsproto.EventUserConfirm, last: []string{fmt.Sprintf("gaveup a %d", n+1), "ask a"},
					start: func(c *conn) {
						c.send("user.solve_tasks", map[string]any{"tasks": []wsproto.Task{failTask("a", "[sim:fail=network*99]")}})
					}},
				{name: "the planning", who: "plan", until: wsproto.EventPlanCancelled, last: []string{"plan cancelled plan_failed"},
					start: func(c *conn) { c.message("Plan it [sim:plan_fail=network*99]") }},
			}
			for _, p := range paths {
				t.Run(p.name, func(t *testing.T) {
					c, _ := connect(t, base)
					p.start(c)
					frames := c.until(p.until)
					var want []string
					for k := 1; k <= n+1; k++ {
						if p.who != "plan" {
							want = append(want, fmt.Sprintf("start %s%d", p.who, k))
						}
						want = append(want, fmt.Sprintf("fail %s%d network retry", p.who, k))
						if k <= n {
							want = append(want, fmt.Sprintf("retry %s%d/%d", p.who, k, n))
						}
					}
					want = append(want, p.last...)
					if got := story(t, frames); strings.Join(got, "|") != strings.Join(want, "|") {
						t.Errorf("got  %q\nwant %q", got, want)
					}
					if p.who != "plan" { // the task waits on its question
						c.send("user.cancel", nil)
						c.until(wsproto.EventPipelineCancelled)
					}
				})
			}
		})
	}
}
