package ledgerread

import "github.com/jackc/pgx/v5/pgxpool"

// Pool is the Reader's pool, for the test that tries to write through it.
func (r *Reader) Pool() *pgxpool.Pool { return r.pool }

// LookupSQL is the lookup query, for the plan test.
var LookupSQL = lookupSQL
