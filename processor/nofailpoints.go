//go:build !failpoints

package processor

import "context"

// failpointsFrom: a build without -tags failpoints has no test stops.
func failpointsFrom(context.Context) hooks { return hooks{} }
