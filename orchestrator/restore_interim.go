package orchestrator

import (
	"context"
	"encoding/json"

	"github.com/baton-run/baton/wsproto"
)

// INTERIM until the checkpoint branch lands: a checkpoint is the state.
type checkpoint struct{ State wsproto.State }

func decodeCheckpoint(b []byte) (checkpoint, error) {
	var cp checkpoint
	err := json.Unmarshal(b, &cp)
	return cp, err
}

func (s *Server) restore(ctx context.Context, sess *session, op Opened) error {
	st, err := stateOf(ctx, op)
	sess.state = st
	return err
}
