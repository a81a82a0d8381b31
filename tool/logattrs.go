package tool

import "context"

type logAttrsKey struct{}

// WithLogAttrs returns a context carrying, besides those ctx already
// carries, slog key-value pairs that say whose call a tool is running
// (the session, run, task and tool call ids): a tool that logs what it
// keeps from the model and the user logs them with it.
func WithLogAttrs(ctx context.Context, args ...any) context.Context {
	prev := LogAttrs(ctx)
	return context.WithValue(ctx, logAttrsKey{}, append(prev[:len(prev):len(prev)], args...))
}

// LogAttrs returns the key-value pairs of ctx's WithLogAttrs calls, outermost
// first; nil when there are none. The caller may append to the result.
func LogAttrs(ctx context.Context) []any {
	args, _ := ctx.Value(logAttrsKey{}).([]any)
	return args[:len(args):len(args)]
}
