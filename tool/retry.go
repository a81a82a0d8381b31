package tool

import "context"

type retryKey struct{}

// WithRetry returns a context that tells a tool its call is a retry: the
// same call (same tool, same arguments, same round of the same task) was
// begun before and its result never came back, because the process
// running it died and another one took the run over. A tool that changes
// the world can use it to look for the effect of the first call before
// making it again.
func WithRetry(ctx context.Context) context.Context {
	return context.WithValue(ctx, retryKey{}, true)
}

// Retry reports whether ctx carries WithRetry: the call may have run
// before, in part or in full.
func Retry(ctx context.Context) bool {
	retry, _ := ctx.Value(retryKey{}).(bool)
	return retry
}
