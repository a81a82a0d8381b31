package myagent

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// stateVersion names the format of a signed state; a state of another
// version is refused.
const stateVersion = "baton-myagent/1"

// resumeState is what a signed state carries: what it takes to resume the
// session through /ws (its id and its resume token as of the export) and
// the seq the client had then.
type resumeState struct {
	SessionID   string    `json:"session_id"`
	ResumeToken string    `json:"resume_token"`
	LastSeq     uint64    `json:"last_seq"`
	ExportedAt  time.Time `json:"exported_at"`
}

// signedState is agent.state_exported's metadata.signed_state, in the
// shape of myagent's own ({state, timestamp, signature, version,
// checksum}). signature is the lowercase hex HMAC-SHA256, under the
// server's key, of version + "\n" + timestamp + "\n" + the state's JSON as
// the server encodes it; checksum is the SHA-256 of that JSON (informative:
// only the signature is trusted).
type signedState struct {
	State     resumeState `json:"state"`
	Timestamp string      `json:"timestamp"`
	Signature string      `json:"signature"`
	Version   string      `json:"version"`
	Checksum  string      `json:"checksum"`
}

func mac(key []byte, version, timestamp string, state []byte) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(version + "\n" + timestamp + "\n"))
	m.Write(state)
	return hex.EncodeToString(m.Sum(nil))
}

// sign returns the signed state of s.
func sign(key []byte, s resumeState) signedState {
	body, _ := json.Marshal(s) // a struct of strings, a number and a time
	ts := s.ExportedAt.UTC().Format(time.RFC3339Nano)
	sum := sha256.Sum256(body)
	return signedState{State: s, Timestamp: ts, Version: stateVersion,
		Signature: mac(key, stateVersion, ts, body), Checksum: hex.EncodeToString(sum[:])}
}

// errState is a signed state refused: forged, tampered, of another format
// or expired.
var errState = errors.New("invalid state")

// verify checks raw (a signed state, as JSON) under key and returns its
// state. A state older than ttl is refused.
func verify(key []byte, raw json.RawMessage, now time.Time, ttl time.Duration) (resumeState, error) {
	var st signedState
	if err := json.Unmarshal(raw, &st); err != nil {
		return resumeState{}, fmt.Errorf("%w: signed_state is not a signed state object", errState)
	}
	if st.Version != stateVersion {
		return resumeState{}, fmt.Errorf("%w: unknown version %q", errState, st.Version)
	}
	body, _ := json.Marshal(st.State)
	want := mac(key, st.Version, st.Timestamp, body)
	if !hmac.Equal([]byte(want), []byte(st.Signature)) {
		return resumeState{}, fmt.Errorf("%w: signature mismatch", errState)
	}
	at, err := time.Parse(time.RFC3339Nano, st.Timestamp)
	if err != nil || !at.Equal(st.State.ExportedAt) {
		return resumeState{}, fmt.Errorf("%w: bad timestamp", errState)
	}
	if now.Sub(at) > ttl {
		return resumeState{}, fmt.Errorf("%w: expired", errState)
	}
	if st.State.SessionID == "" || st.State.ResumeToken == "" {
		return resumeState{}, fmt.Errorf("%w: no session", errState)
	}
	return st.State, nil
}
