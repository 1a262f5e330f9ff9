package ledger_test

import (
	"context"
	"sync"
	"testing"

	"github.com/dedupio/dedup/internal/testsupport/pgtest"
	"github.com/dedupio/dedup/sink/ledger"
)

// Routers and workers that start together on an empty database all run
// the migrations at once: none may fail (goose serialises them with a
// PostgreSQL advisory lock).
func TestMigrateConcurrently(t *testing.T) {
	for round := 0; round < 10; round++ {
		url := pgtest.NewDatabase(t)
		var wg sync.WaitGroup
		errs := make(chan error, 6)
		for i := 0; i < 6; i++ {
			wg.Add(1)
			go func() { defer wg.Done(); errs <- ledger.Migrate(context.Background(), url) }()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
	}
}
