package client_test

import (
	"context"
	"testing"
	"time"

	"github.com/baton-run/baton/client"
	"github.com/baton-run/baton/wsproto"
)

// TestResentAnswersAreNotErrors: after a resume the client sends again the
// answers of the current run, and the server answers step_id_mismatch to
// one it already had. The client counts that reply in ResentAnswers, not
// in Errors; an answer the application gets wrong is still an error.
func TestResentAnswersAreNotErrors(t *testing.T) {
	url := serve(t)
	tests := []struct {
		name string
		// act runs once the task that asked has completed: the server had
		// the answer before the client did anything else.
		act         func(ctx context.Context, t *testing.T, c *client.Client)
		wait        func(v client.View) bool
		errors      int
		resent      int
		wantResumes int
	}{
		{
			name: "an answer re-sent after a resume",
			act:  func(_ context.Context, _ *testing.T, c *client.Client) { c.Drop() },
			// The server's reply to the re-sent answer comes after the
			// resume; the test waits for it.
			wait:   func(v client.View) bool { return v.Stats.ResentAnswers+v.Stats.Errors >= 1 },
			resent: 1, wantResumes: 1,
		},
		{
			name: "an answer the application sends twice",
			act: func(ctx context.Context, t *testing.T, c *client.Client) {
				v := c.View()
				if len(v.Run.Answers) != 1 {
					t.Fatalf("answers in the view: %+v, want a's", v.Run.Answers)
				}
				for _, a := range v.Run.Answers {
					if err := c.Respond(ctx, a.StepID, client.Answer{Text: &a.Text}); err != nil {
						t.Fatal(err)
					}
				}
			},
			wait:   func(v client.View) bool { return v.Stats.ResentAnswers+v.Stats.Errors >= 1 },
			errors: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			text := "the first one"
			c, err := client.Dial(ctx, url, &client.Options{Resume: true, ResumeDelay: time.Millisecond,
				OnConfirm: func(m wsproto.UserConfirm) *client.Answer {
					if m.Kind == wsproto.ConfirmInput {
						return &client.Answer{Text: &text}
					}
					return nil
				}})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			// a asks the user and completes with the answer; b keeps the
			// run going, so the answer stays one of the current run's.
			err = c.SolveTasks(ctx, []wsproto.Task{
				{ID: "a", Title: "Ask", Description: "[sim:ask=Which option?]", DependsOn: []string{}},
				{ID: "b", Title: "Wait", Description: "[sim:sleep=1h]", DependsOn: []string{}}})
			if err != nil {
				t.Fatal(err)
			}
			err = c.Wait(ctx, func(v client.View) bool {
				return v.Run != nil && len(v.Run.Tasks) == 2 && v.Run.Tasks[0].Status == wsproto.TaskCompleted
			})
			if err != nil {
				t.Fatalf("task a did not complete: %v", err)
			}
			tt.act(ctx, t, c)
			if err := c.Wait(ctx, tt.wait); err != nil {
				t.Fatal(err)
			}
			if err := c.Send(ctx, wsproto.EventUserCancel, "", "", nil); err != nil {
				t.Fatal(err)
			}
			if err := c.Wait(ctx, func(v client.View) bool { return v.Phase == wsproto.PhaseIdle }); err != nil {
				t.Fatalf("the run did not end: %v", err)
			}
			s := c.View().Stats
			if s.Errors != tt.errors || s.ResentAnswers != tt.resent || s.Resumes != tt.wantResumes || len(s.Violations) > 0 {
				t.Errorf("errors %d, resent answers %d, resumes %d, violations %q; want %d, %d, %d and none",
					s.Errors, s.ResentAnswers, s.Resumes, s.Violations, tt.errors, tt.resent, tt.wantResumes)
			}
		})
	}
}
