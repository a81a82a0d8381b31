package edge

import "os"

// openSpare opens the descriptor a Listener holds in reserve: when the
// process has no descriptor left, freeing this one lets the listener
// accept the connection waiting in the backlog, only to answer and close
// it. Left in the backlog, the connection would make every accept fail
// at once, in a loop. Nil when none can be opened now.
func openSpare() *os.File {
	f, err := os.Open(os.DevNull)
	if err != nil {
		return nil
	}
	return f
}
