package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/baton-run/baton/client"
	"github.com/baton-run/baton/wsproto"
)

// TestAdaptiveStory is issue 10's "done when", through the Go client: an
// adaptive request in which the agent asks a question, a task asks the
// user too, a finished task is restarted, and the plan grows by a task
// the user approves; the run ends with a final answer — and the
// connection drops in the middle of each step (the client resumes by
// itself and checks every seq and checksum).
func TestAdaptiveStory(t *testing.T) {
	t.Parallel()
	base := startServer(t)
	log := &frameLog{}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, err := client.Dial(ctx, wsURL(base), &client.Options{Resume: true, ResumeDelay: time.Millisecond, AckEvery: 7, OnEvent: log.add})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	wait := func(what string, cond func(v client.View) bool) client.View {
		t.Helper()
		if err := cl.Wait(ctx, cond); err != nil {
			t.Fatalf("waiting for %s: %v (view %+v)", what, err, cl.View())
		}
		return cl.View()
	}
	// open finds the open confirmation of a kind, for a task ("" for none).
	open := func(kind, taskID string) func(v client.View) bool {
		return func(v client.View) bool { return pending(v, kind, taskID).StepID != "" }
	}
	drops := 0
	drop := func() { // and wait until the client is back
		t.Helper()
		drops++
		cl.Drop()
		wait("the resume", func(v client.View) bool { return v.Stats.Resumes >= drops })
	}
	respond := func(q wsproto.UserConfirm, a client.Answer) {
		t.Helper()
		if err := cl.Respond(ctx, q.StepID, a); err != nil {
			t.Fatalf("respond: %v", err)
		}
	}
	yes, text := true, func(s string) *string { return &s }

	if err := cl.MessageAdaptive(ctx, "Plan a weekend in Lisbon [sim:decide=request_input:Which neighbourhood?]"); err != nil {
		t.Fatal(err)
	}
	// 1. The plan: the final task will ask the user, then grow the plan.
	v := wait("the plan", open(wsproto.ConfirmPlan, ""))
	drop()
	plan := pending(v, wsproto.ConfirmPlan, "")
	final := plan.Tasks[len(plan.Tasks)-1]
	edited := append([]wsproto.Task(nil), plan.Tasks...)
	edited[len(edited)-1].Description += " [sim:ask=Ready to write it up?] [sim:decide=adjust_plan:+Check the weather]"
	respond(plan, client.Answer{Confirmed: &yes, Tasks: edited})

	// 2. The decide step asks a question.
	v = wait("the decide step's question", open(wsproto.ConfirmInput, ""))
	drop()
	respond(pending(v, wsproto.ConfirmInput, ""), client.Answer{Text: text("Alfama")})

	// 3. The final task asks the user; meanwhile t1, finished, is restarted.
	v = wait("the final task's question", open(wsproto.ConfirmInput, final.ID))
	if err := cl.RestartTask(ctx, "t1"); err != nil {
		t.Fatal(err)
	}
	// The drop comes once the server has the restart: a command still on
	// its way when a connection drops may be lost with it (a client that
	// closes with unread data resets the connection, and the server's
	// kernel discards what its reader had not taken), and a restart is
	// not one to send twice.
	wait("t1's restart", func(v client.View) bool { return task(v, "t1").Attempt >= 2 })
	drop()
	wait("t1's second execution", func(v client.View) bool {
		t1 := task(v, "t1")
		return t1.Status == wsproto.TaskCompleted && t1.Attempt == 2
	})
	respond(pending(v, wsproto.ConfirmInput, final.ID), client.Answer{Text: text("yes")})

	// 4. The plan grows by a task the user approves.
	v = wait("the adjustment", open(wsproto.ConfirmAdjust, ""))
	drop()
	adjust := pending(v, wsproto.ConfirmAdjust, "")
	if len(adjust.Added) != 1 || adjust.Added[0].Title != "Check the weather" || adjust.Added[0].DependsOn[0] != final.ID {
		t.Fatalf("plan_adjust %+v", adjust)
	}
	respond(adjust, client.Answer{Confirmed: &yes})

	v = wait("the final answer", func(v client.View) bool { return v.Run != nil && v.Run.FinalAnswer != nil })
	if len(v.Stats.Violations) > 0 || v.Stats.Resumes != drops {
		t.Fatalf("violations %v, %d resumes", v.Stats.Violations, v.Stats.Resumes)
	}
	r := v.Run
	var answers []string
	for _, a := range r.Answers {
		answers = append(answers, a.Question+" "+a.Text)
	}
	if r.PlanVersion != 2 || len(r.Tasks) != len(plan.Tasks)+1 || task(v, adjust.Added[0].ID).Status != wsproto.TaskCompleted ||
		strings.Join(answers, "|") != "Which neighbourhood? Alfama|Ready to write it up? yes" {
		t.Errorf("final state %+v", r)
	}
	var seqd []client.Frame
	restarted := 0
	for _, f := range log.all() {
		if wsproto.Sequenced(f.Event) {
			seqd = append(seqd, f)
		}
		if f.Event == wsproto.EventSolverRestarted {
			restarted++
		}
	}
	checkStream(t, seqd, 1)
	checkDecisions(t, seqd)
	if restarted == 0 {
		t.Errorf("no solver.restarted")
	}
}

// pending returns the run's open confirmation of a kind for a task ("" for
// none), or the zero value.
func pending(v client.View, kind, taskID string) wsproto.UserConfirm {
	if v.Run != nil {
		for _, c := range v.Run.PendingConfirm {
			if c.Kind == kind && c.TaskID == taskID {
				return c
			}
		}
	}
	return wsproto.UserConfirm{}
}

// task returns a task of the run as the client sees it.
func task(v client.View, id string) wsproto.TaskState {
	if v.Run != nil {
		for _, t := range v.Run.Tasks {
			if t.ID == id {
				return t
			}
		}
	}
	return wsproto.TaskState{}
}
