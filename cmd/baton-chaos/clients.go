package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/baton-run/baton/client"
	"github.com/baton-run/baton/wsproto"
)

// A chaos client is one user: it opens a session on a random node,
// starts runs one after another, answers every confirmation, drops its
// connection at random (the client then resumes on another node, as one
// behind a load balancer would), and checks its own stream. When its
// session is lost (its resume rejected) it opens another.

// clientResult is what one client saw, over all its sessions.
type clientResult struct {
	Sessions      int
	Started       int // runs seen to start
	Ended         int // runs seen to end, with a final answer or without
	Failed        int // runs ended without a final answer
	LostRejected  int // runs open when their session's resume was rejected
	Stranded      []string
	Drops         int
	Resumes       int
	Resyncs       int
	Rejections    int
	Errors        int
	ResentAnswers int
	ResentStarts  int // run starts sent again after a drop
	Violations    violations
	Examples      []string // the first violations, as the client wrote them
	ConnectErr    error    // the last dial that failed for good
}

// phases are the moments every client shares.
type phases struct {
	stopRuns time.Time // no run starts after it
	hardEnd  time.Time // no wait lasts past it: a run open then is stranded
}

// workloadKinds are the runs a client starts, drawn with these weights:
// a planned request (a plan to confirm), tasks that each call the
// counting tool once, and a task that fails once and is retried (no tool:
// its retry would count as a repeat).
var workloadKinds = []string{"plan", "tools", "tools", "flaky"}

// startWorkload sends the start of a run of kind; key names its tool calls.
func startWorkload(ctx context.Context, cl *client.Client, kind, key string, rng *rand.Rand) error {
	switch kind {
	case "plan":
		return cl.Message(ctx, fmt.Sprintf("Chaos request %d", rng.IntN(1000)))
	case "flaky":
		return cl.SolveTasks(ctx, []wsproto.Task{chaosTask("a", "[sim:fail=network*1]"), chaosTask("b", "", "a")})
	}
	call := func(id string) string { return fmt.Sprintf(`[sim:tool=%s {"key":"%s-%s"}]`, toolName, key, id) }
	return cl.SolveTasks(ctx, []wsproto.Task{chaosTask("a", call("a")), chaosTask("b", call("b")), chaosTask("c", call("c"), "a", "b")})
}

func chaosTask(id, desc string, deps ...string) wsproto.Task {
	if deps == nil {
		deps = []string{}
	}
	return wsproto.Task{ID: id, Title: "Chaos task " + id, Description: desc, DependsOn: deps}
}

// runClient is client i's whole life.
func runClient(ctx context.Context, cfg config, urls []string, i int, ph phases) clientResult {
	var res clientResult
	rng := rand.New(rand.NewPCG(cfg.seed, uint64(i)+1))
	for s := 0; ctx.Err() == nil && time.Now().Before(ph.stopRuns); s++ {
		if !runSession(ctx, cfg, urls, fmt.Sprintf("c%d-s%d", i, s), rng, ph, &res) {
			break
		}
	}
	return res
}

// runSession runs one session; it reports whether another may follow
// (its resume was rejected, and runs may still start).
func runSession(ctx context.Context, cfg config, urls []string, name string, rng *rand.Rand, ph phases, res *clientResult) bool {
	tracked := newRuns()
	first := rng.IntN(len(urls))
	var elsewhere []string
	for _, k := range rng.Perm(len(urls)) {
		if k != first {
			elsewhere = append(elsewhere, urls[k])
		}
	}
	opts := &client.Options{Resume: true, AckEvery: 5, OnEvent: tracked.frame, OnConfirm: client.AgreeAll,
		Elsewhere: elsewhere, SkipState: true, ResumeDelay: 100 * time.Millisecond}
	cl, err := dial(ctx, urls[first], opts, ph.stopRuns)
	if err != nil {
		res.ConnectErr = err
		return false
	}
	res.Sessions++

	hard, cancel := context.WithDeadline(ctx, ph.hardEnd)
	defer cancel()
	drops := make(chan struct{})
	dropped := make(chan int, 1)
	// The drops have an RNG of their own: rng is the session loop's.
	dropRNG := rand.New(rand.NewPCG(rng.Uint64(), 0))
	go func() { // owned by runSession: it waits for dropped
		dropped <- dropLoop(cl, cfg.dropRate, dropRNG, drops)
	}()

	for r := 0; ctx.Err() == nil && time.Now().Before(ph.stopRuns); r++ {
		kind := workloadKinds[rng.IntN(len(workloadKinds))]
		if !startRun(hard, cl, tracked, kind, fmt.Sprintf("%s-r%d", name, r), rng, res) {
			break
		}
		// The run is started: wait for every run of the session to end.
		if cl.Wait(hard, func(client.View) bool { return len(tracked.open()) == 0 }) != nil {
			break
		}
	}
	// Past stopRuns (or the session is lost): what is still open has
	// until hardEnd to end.
	cl.Wait(hard, func(client.View) bool { return len(tracked.open()) == 0 })
	close(drops)
	res.Drops += <-dropped
	cl.Close()

	v := cl.View()
	started, ended, failed := tracked.counts()
	res.Started += started
	res.Ended += ended
	res.Failed += failed
	res.Resumes += v.Stats.Resumes
	res.Resyncs += v.Stats.Resyncs
	res.Rejections += v.Stats.Rejected
	res.Errors += v.Stats.Errors
	res.ResentAnswers += v.Stats.ResentAnswers
	res.Violations.add(classify(v.Stats.Violations))
	for _, s := range v.Stats.Violations {
		if len(res.Examples) < 10 {
			res.Examples = append(res.Examples, fmt.Sprintf("%s (session %s): %s", name, v.SessionID, s))
		}
	}
	open := tracked.open()
	if v.Stats.Rejected > 0 {
		// The server said the session is gone: an explicit end.
		res.LostRejected += len(open)
		return true
	}
	for _, id := range open {
		res.Stranded = append(res.Stranded, fmt.Sprintf("%s: session %s run %s", name, v.SessionID, id))
	}
	return false
}

// dial connects to url, trying again (the node may be down) until until.
func dial(ctx context.Context, url string, opts *client.Options, until time.Time) (*client.Client, error) {
	for {
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		cl, err := client.Dial(dctx, url, opts)
		cancel()
		if err == nil {
			return cl, nil
		}
		if ctx.Err() != nil || time.Now().After(until) {
			return nil, fmt.Errorf("dial %s: %w", url, err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond): // pacing between attempts
		}
	}
}

// dropLoop drops cl's connection at random, a Poisson process of rate
// perMinute, until stop is closed; it returns how many it dropped.
func dropLoop(cl *client.Client, perMinute float64, rng *rand.Rand, stop <-chan struct{}) int {
	if perMinute <= 0 {
		<-stop
		return 0
	}
	n := 0
	for {
		wait := time.Duration(rng.ExpFloat64() / perMinute * float64(time.Minute))
		select {
		case <-stop:
			return n
		case <-time.After(wait):
			cl.Drop()
			n++
		}
	}
}

// startRun starts a run and waits until the session shows it started. A
// start may be lost with a connection dropped before the server read it:
// it is sent again when a resume came and the run did not show within a
// few seconds. It reports false when the session cannot go on (closed,
// lost, or past ctx).
func startRun(ctx context.Context, cl *client.Client, tracked *runs, kind, key string, rng *rand.Rand, res *clientResult) bool {
	before, _, _ := tracked.counts()
	isStarted := func(client.View) bool { s, _, _ := tracked.counts(); return s > before }
	for attempt := 0; ; attempt++ {
		resumes := cl.View().Stats.Resumes
		if attempt > 0 {
			res.ResentStarts++
		}
		err := startWorkload(ctx, cl, kind, fmt.Sprintf("%s-t%d", key, attempt), rng)
		if errors.Is(err, client.ErrClosed) || ctx.Err() != nil {
			return false
		}
		if err == nil {
			// Sent: it shows, or a resume comes first (the connection it
			// went on may have dropped before the server read it).
			if cl.Wait(ctx, func(v client.View) bool { return isStarted(v) || v.Stats.Resumes > resumes }) != nil {
				return false
			}
			if isStarted(client.View{}) {
				return true
			}
		} else if cl.Wait(ctx, func(v client.View) bool { return v.Stats.Resumes > resumes }) != nil {
			return false // not sent: the client is between connections
		}
		// A resume came: the replay or the snapshot after it shows the
		// run if the server had it. A start sent twice is answered busy.
		wctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		err = cl.Wait(wctx, isStarted)
		cancel()
		if err == nil {
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		select {
		case <-cl.Done():
			return false
		default:
		}
	}
}
