package ledger_test

import (
	"strings"
	"testing"

	"github.com/dedupio/dedup/sink/ledger"
	"github.com/dedupio/dedup/sink/ledger/pooler"
)

// A connection string may set pgx's default_query_exec_mode. In exec and
// simple_protocol pgx guesses each parameter's type from its Go value, and
// has none for the ledger's arrays: every claim and mark would fail with
// pgx's "unable to encode", naming no setting. Validate refuses them at
// start, naming the field and the parameter; the other modes run (the
// transaction pooler's own choice, cache_describe, included), and with
// postgres.pooler: transaction the pooler's choice replaces the URL's.
func TestConfigRefusesAQueryExecModeWhoseStatementsCannotSendTheLedgersArrays(t *testing.T) {
	cfg := func(mode string, p pooler.Mode) ledger.Config {
		c := ledger.DefaultConfig()
		c.URL = "postgres://u@localhost/d?default_query_exec_mode=" + mode
		c.Pooler = p
		return c
	}
	for _, mode := range []string{"exec", "simple_protocol"} {
		err := cfg(mode, pooler.None).Validate()
		if err == nil || !strings.HasPrefix(err.Error(), "postgres.url: ") || !strings.Contains(err.Error(), "default_query_exec_mode="+mode) {
			t.Errorf("default_query_exec_mode=%s: %v, want an error naming postgres.url and the parameter", mode, err)
		}
		if err := cfg(mode, pooler.Transaction).Validate(); err != nil {
			t.Errorf("default_query_exec_mode=%s behind a transaction pooler (which sets its own): %v", mode, err)
		}
	}
	for _, mode := range []string{"cache_statement", "cache_describe", "describe_exec"} {
		if err := cfg(mode, pooler.None).Validate(); err != nil {
			t.Errorf("default_query_exec_mode=%s: %v", mode, err)
		}
	}
}

func TestConfigRefusesAStartedCacheOutOfRangeNamingIt(t *testing.T) {
	for n, ok := range map[int]bool{-1: false, 0: true, 100_000: true, 10_000_000: true, 10_000_001: false} {
		c := ledger.DefaultConfig()
		c.URL = "postgres://u@localhost/d"
		c.StartedCache = n
		err := c.Validate()
		if ok != (err == nil) || (err != nil && !strings.HasPrefix(err.Error(), "postgres.started_cache: ")) {
			t.Errorf("started_cache %d: %v", n, err)
		}
	}
}
