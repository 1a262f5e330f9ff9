//go:build failpoints

package processor

import "context"

// Failpoints are the router's test-only stops (see hooks); this build has
// them because it was built with -tags failpoints (cmd/dedup's crash
// tests).
type Failpoints hooks

type failpointsKey struct{}

// WithFailpoints returns ctx carrying f, for Router.Run.
func WithFailpoints(ctx context.Context, f Failpoints) context.Context {
	return context.WithValue(ctx, failpointsKey{}, f)
}

func failpointsFrom(ctx context.Context) hooks {
	f, _ := ctx.Value(failpointsKey{}).(Failpoints)
	return hooks(f)
}
