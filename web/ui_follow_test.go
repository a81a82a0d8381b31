package web

import (
	"strings"
	"testing"
	"time"
)

// TestUIFollowOnSecondDevice: the page on a laptop shows an "open on
// another device" link; a second browser (its own storage, as a phone)
// opened on it follows the session: it shows the open plan, approves it,
// and both pages show every event once, through a cut of every
// connection, and the same answer — the laptop never replaced.
func TestUIFollowOnSecondDevice(t *testing.T) {
	srv := startServer(t, 100*time.Millisecond, nil)
	laptop := openPage(t, srv)
	laptop.request("Compare three laptops for travel")
	laptop.waitPlan()

	laptop.click("share")
	laptop.waitFor("the link", `document.querySelector('[data-testid=share-link]').value.includes("#follow=")`)
	var link, session string
	laptop.eval(`document.querySelector('[data-testid=share-link]').value`, &link)
	laptop.eval(`window.batonClient.sessionId`, &session)
	path, ok := strings.CutPrefix(link, srv.URL)
	if !ok || !strings.HasPrefix(path, "/#follow="+session+".") {
		t.Fatalf("share link %q: want %s/#follow=%s.<follow token>", link, srv.URL, session)
	}

	phone := openPageAt(t, srv, path)
	phone.waitConnected()
	var phoneSession, address string
	phone.eval(`window.batonClient.sessionId`, &phoneSession)
	phone.eval(`location.href`, &address)
	if phoneSession != session {
		t.Fatalf("the phone holds session %s, want the laptop's %s", phoneSession, session)
	}
	if strings.Contains(address, "follow=") {
		t.Errorf("the follow token stayed in the phone's address bar: %s", address)
	}
	phone.waitPlan()
	phone.click("confirm-plan")
	laptop.waitFor("the laptop to see a task run", `!!document.querySelector('article[data-status="running"]')`)
	laptop.mustBeMidRun()
	if n := srv.Cut(); n < 2 {
		t.Fatalf("cut %d connections, want both devices'", n)
	}
	for name, p := range map[string]*page{"laptop": laptop, "phone": phone} {
		p.waitFor(name+" to resume", `window.batonClient.stats.resumes >= 1`)
	}
	answer := laptop.waitAnswer()
	if got := phone.waitAnswer(); got != answer {
		t.Errorf("the phone's answer %.200q differs from the laptop's %.200q", got, answer)
	}
	for name, p := range map[string]*page{"laptop": laptop, "phone": phone} {
		allStatus(t, p.tasks(), "completed")
		seqs := p.logSeqs()
		var resyncs int
		p.eval(`window.batonClient.stats.resyncs`, &resyncs)
		// A page that fell behind the ring while away resyncs (its log
		// then skips what the snapshot covers): only a busy machine makes
		// one that slow.
		if resyncs == 0 {
			checkContiguous(t, seqs)
		} else {
			t.Logf("%s resynced %d times", name, resyncs)
		}
		// The laptop saw every event; the phone joined when the laptop's
		// acks may have pruned the ring, and then began with a snapshot.
		if seqs[0] != 1 && (name == "laptop" || seqs[0] > 20) {
			t.Errorf("%s's event log starts at seq %d", name, seqs[0])
		}
		var state string
		p.eval(`document.querySelector('[data-testid=connection]').dataset.state`, &state)
		if state != "CONNECTED" {
			t.Errorf("%s is %s at the end, want CONNECTED (not replaced)", name, state)
		}
	}
	var a, b struct {
		Checksum string
		LastSeq  int
	}
	laptop.eval(`({checksum: window.batonClient.checksum, lastSeq: window.batonClient.lastSeq})`, &a)
	phone.eval(`({checksum: window.batonClient.checksum, lastSeq: window.batonClient.lastSeq})`, &b)
	if a != b {
		t.Errorf("the laptop ended at %+v, the phone at %+v: want the same", a, b)
	}
}
