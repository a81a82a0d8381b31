package main

import (
	"context"
	"reflect"
	"testing"

	"github.com/baton-run/baton/client"
	"github.com/baton-run/baton/wsproto"
)

// TestFollowEditedPlanReachesEveryDevice: the phone answers the plan with
// an edited list and a task's question with a text; the laptop, which
// answered nothing and drops meanwhile, learns both from the events
// (agent.confirm_settled), not a snapshot, and both devices end with the
// same run: the edited tasks, the same results, the same answers.
func TestFollowEditedPlanReachesEveryDevice(t *testing.T) {
	base := startServer(t, "--sim-delay", "10ms")
	ctx := context.Background()
	var laptopErrs, phoneErrs errorLog
	laptop, err := client.Dial(ctx, wsURL(base), &client.Options{Resume: true, Follow: true, AckEvery: 2, OnEvent: laptopErrs.onEvent})
	if err != nil {
		t.Fatal(err)
	}
	defer laptop.Close()
	first := laptop.View()
	if err := laptop.Message(ctx, "Compare three databases"); err != nil {
		t.Fatal(err)
	}
	waitView(t, ctx, laptop, "the plan's confirmation", func(v client.View) bool { return v.Run != nil && len(v.Run.PendingConfirm) > 0 })
	proposed := laptop.View().Run.Tasks

	edited := []wsproto.Task{
		{ID: "x1", Title: "Pick the candidates", Description: "[sim:ask=Which one first?]", DependsOn: []string{}},
		{ID: "x2", Title: "Benchmark them", DependsOn: []string{"x1"}},
	}
	yes, text := true, "Postgres"
	phone, err := client.Follow(ctx, wsURL(base), first.SessionID, first.FollowToken, &client.Options{Resume: true, AckEvery: 3,
		OnEvent: phoneErrs.onEvent,
		OnConfirm: func(c wsproto.UserConfirm) *client.Answer {
			switch c.Kind {
			case wsproto.ConfirmPlan:
				laptop.Drop() // away while the phone answers
				return &client.Answer{Confirmed: &yes, Tasks: edited}
			case wsproto.ConfirmInput:
				laptop.Drop()
				return &client.Answer{Text: &text}
			}
			return client.AgreeAll(c)
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer phone.Close()
	joined := phone.View().Stats.Resyncs

	p := waitView(t, ctx, phone, "the phone's end", finished)
	l := waitView(t, ctx, laptop, "the laptop at the phone's seq", func(v client.View) bool { return finished(v) && v.LastSeq >= p.LastSeq })
	p = waitView(t, ctx, phone, "the phone at the laptop's seq", func(v client.View) bool { return v.LastSeq >= l.LastSeq })
	sameEnd(t, l, p)
	if l.Stats.Resumes < 1 || l.Stats.Resyncs != 0 || p.Stats.Resyncs != joined {
		t.Errorf("laptop: %d resumes, %d resyncs; phone %d resyncs after joining: want the laptop's drops replayed, no snapshot",
			l.Stats.Resumes, l.Stats.Resyncs, p.Stats.Resyncs-joined)
	}
	ids := func(ts []wsproto.TaskState) (out []string) {
		for _, t := range ts {
			out = append(out, t.ID+":"+t.Status)
		}
		return out
	}
	if got, want := ids(l.Run.Tasks), []string{"x1:" + wsproto.TaskCompleted, "x2:" + wsproto.TaskCompleted}; !reflect.DeepEqual(got, want) {
		t.Errorf("the laptop's tasks %v (proposed %v): want the phone's edit, %v", got, ids(proposed), want)
	}
	if !reflect.DeepEqual(l.Run.Tasks, p.Run.Tasks) || !reflect.DeepEqual(l.Run.Answers, p.Run.Answers) {
		t.Errorf("the devices ended apart:\nlaptop %+v %+v\nphone  %+v %+v", l.Run.Tasks, l.Run.Answers, p.Run.Tasks, p.Run.Answers)
	}
	if len(l.Run.Answers) != 1 || l.Run.Answers[0].Text != text || l.Run.Answers[0].TaskID != "x1" {
		t.Errorf("the laptop's answers %+v: want the phone's %q to x1's question", l.Run.Answers, text)
	}
	if len(laptopErrs.codes())+len(phoneErrs.codes()) > 0 {
		t.Errorf("system.errors: laptop %v, phone %v", laptopErrs.codes(), phoneErrs.codes())
	}
}
