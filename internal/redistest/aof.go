package redistest

import "testing"

// StartAOF runs a redis-server for t as Start does, but persisting to an
// append-only file in its directory, fsynced as fsync says ("always",
// "everysec" or "no"). Its Restart is then a crash and a restart in place:
// the process is killed with SIGKILL and started again on the same port
// and directory, and loads what the AOF kept, as a production Redis
// restarted after a crash does.
func StartAOF(t testing.TB, fsync string) *Server {
	t.Helper()
	s := Start(t)
	// Start found the port and registered the cleanup; start it again
	// with the persistence on.
	s.stop()
	s.conf = []string{"--appendonly", "yes", "--appendfsync", fsync}
	if err := s.start(); err != nil {
		t.Fatalf("redistest: start with an AOF: %v", err)
	}
	return s
}
