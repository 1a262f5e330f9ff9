package schemas

import "fmt"

// The ledger's unique key is dedup_ledger_key(workflow_id) (migration
// 00012_ledger_key.sql, the one definition of the digest): a statement
// finds a dedup_ledger row through that index and then checks the
// workflow ID itself, so two IDs that share a digest never read or change
// each other's row. These two helpers are the only spellings of that
// lookup; every statement on dedup_ledger by workflow ID uses one.

// LedgerRowsOf is the predicate that selects the dedup_ledger rows (of the
// table alias alias, "" for none) of the workflow IDs in the text[]
// parameter param (e.g. "$1").
func LedgerRowsOf(alias, param string) string {
	if alias != "" {
		alias += "."
	}
	return fmt.Sprintf(`dedup_ledger_key(%[1]sworkflow_id) = ANY(ARRAY(SELECT dedup_ledger_key(w) FROM unnest(%[2]s::text[]) w)) AND %[1]sworkflow_id = ANY(%[2]s::text[])`, alias, param)
}

// LedgerRowIs is the join condition of the dedup_ledger row of alias
// alias with the workflow ID expression id (a column of another relation
// of the statement, or a text parameter).
func LedgerRowIs(alias, id string) string {
	return fmt.Sprintf(`dedup_ledger_key(%[1]s.workflow_id) = dedup_ledger_key(%[2]s) AND %[1]s.workflow_id = %[2]s`, alias, id)
}
