package edge

// ConnsForFileLimit is the most connections (ListenOptions.MaxConns) a
// server whose process may open limit files should hold. An eighth of the
// limit, and at least 64 or half of it, is left for everything else the
// process opens (its standard streams, a Redis client's pool, MCP
// servers' pipes, the files its tools read, the listener's spare); of
// the rest, four fifths are the cap and a fifth the refused connections
// being answered (MaxRefusing defaults to at most a quarter of the cap).
// 0 (no cap) for a limit of 0, which FileLimit reports when it cannot
// tell.
func ConnsForFileLimit(limit uint64) int {
	if limit == 0 {
		return 0
	}
	limit = min(limit, 1<<30) // an unlimited process: a cap that never binds
	reserve := max(limit/8, min(64, limit/2))
	return int((limit - reserve) * 4 / 5)
}
