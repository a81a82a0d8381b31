package orchestrator

import (
	"crypto/sha256"
	"testing"
	"time"
)

// TestSupersededLocked: without a cluster, a session orders resumes with
// one token by their arrival as the store does (rotateScript): of two
// resumes with the token a rotation replaced, the one that arrived more
// than RotationSkew before the resume holding the token lost to it,
// whenever it reaches the lock; one with the current token never does.
func TestSupersededLocked(t *testing.T) {
	base := time.Now()
	at := func(d time.Duration) *rotation { return newRotation(base.Add(d)) }
	tests := []struct {
		name string
		// rotated is the resume that made the current token, from token
		// "t0", at its arrival; then a resume with token arrives at at.
		rotated time.Duration
		token   string
		at      time.Duration
		want    bool
	}{
		{name: "with the current token, however early", rotated: 10 * time.Second, token: "current", at: 0, want: false},
		{name: "with the previous token, arrived later", rotated: 10 * time.Second, token: "t0", at: 11 * time.Second, want: false},
		{name: "with the previous token, within the skew before", rotated: 10 * time.Second, token: "t0", at: 10*time.Second - RotationSkew/2, want: false},
		{name: "with the previous token, past the skew before", rotated: 10 * time.Second, token: "t0", at: 10*time.Second - RotationSkew - time.Millisecond, want: true},
		{name: "with the previous token, seconds before", rotated: 10 * time.Second, token: "t0", at: 2 * time.Second, want: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sess := &session{tokenHash: sha256.Sum256([]byte("t0"))}
			r := at(tt.rotated)
			r.token, r.hash = "current", sha256.Sum256([]byte("current"))
			sess.rotateLocked("t0", r)
			if !sess.tokenAccepted("t0") || !sess.tokenAccepted("current") {
				t.Fatal("after a rotation both tokens resume until it is committed")
			}
			if got := sess.supersededLocked(tt.token, at(tt.at)); got != tt.want {
				t.Fatalf("superseded %v, want %v", got, tt.want)
			}
		})
	}

	// The latest arrival counts: a resume from the previous token that
	// arrived within the skew before the holder keeps rotAt the holder's.
	sess := &session{tokenHash: sha256.Sum256([]byte("t0"))}
	sess.rotateLocked("t0", at(10*time.Second))
	sess.rotateLocked("t0", at(9500*time.Millisecond))
	if !sess.rotAt.Equal(base.Add(10 * time.Second)) {
		t.Fatalf("rotAt %v after an earlier arrival, want the later one's", sess.rotAt.Sub(base))
	}
	if !sess.supersededLocked("t0", at(8900*time.Millisecond)) {
		t.Fatal("a resume past the skew before the latest arrival is not superseded")
	}
}
