package buffer

// Durable is a Ring that copies what it holds to a store shared by every
// server (Redis), so that another server can serve the session, and take
// it over, from the store alone. It adds three things to the Ring
// contract, all called with the session's lock held and all answering
// from memory:
//
//   - A checkpoint: the session's state as of the latest appended seq
//     (opaque bytes to the ring), written to the store together with the
//     events of its unit, never before them and never after a later one.
//   - Units: Commit hands everything appended and checkpointed since the
//     last Commit to the writer as one unit. The writer writes whole units
//     only, several at a time, in one round trip where it can; so a
//     transition's event and the checkpoint that records it reach the
//     store together or not at all.
//   - Durability: Durable reports the latest seq the store holds, and the
//     OnDurable callback given when the ring was made receives the entries
//     of each unit once the store holds them. A server sends its clients
//     only durable events, so no client ever holds an event that a server
//     taking over would not find.
type Durable interface {
	Ring
	// Checkpoint records data as the state as of the latest appended seq;
	// it is written with the current unit, replacing any earlier one.
	Checkpoint(data []byte)
	// Commit ends the current unit and wakes the writer. It never waits.
	Commit()
	// Durable returns the latest seq the store is known to hold and its
	// checksum.
	Durable() (seq uint64, checksum string)
}

// Parted is a Durable ring that takes its checkpoint in named parts, so
// that a transition stores only the parts it changed: its cost is what
// changed, not the whole state. The checkpoint is then the set of parts,
// as the store returns it on opening the session; what a part holds is
// opaque to the ring, as a whole checkpoint is.
type Parted interface {
	Durable
	// CheckpointParts records a change of the checkpoint as of the latest
	// appended seq: each part of parts is set to its value, or removed
	// when its value is nil; with reset, every part not in parts is
	// removed first. It is written with the current unit, after any
	// earlier change. The ring keeps parts and its values as they are: do
	// not modify them afterwards. Checkpoint(data) is CheckpointParts of
	// one part named "" with reset.
	CheckpointParts(parts map[string][]byte, reset bool)
}
