package processor

// claimPolls bounds the polls one claim statement takes (gatherPolls).
const claimPolls = 2

// gatherPolls is b with the polls already waiting behind it in q, in poll
// order, up to claimPolls polls: a claimer that fell behind (a replay,
// where the ledger's round trip is the pipeline's slowest step) pays the
// statement's fixed cost once for them, as if they were one poll, and the
// verdicts are the same. A claimer that keeps up finds none waiting and
// claims each poll alone, as soon as it is decided.
func gatherPolls(b *claimBatch, q <-chan *claimBatch) *claimBatch {
	for polls := 1; polls < claimPolls; polls++ {
		var next *claimBatch
		select {
		case next = <-q:
		default:
		}
		if next == nil { // none waiting, or q closed
			return b
		}
		b = &claimBatch{intents: append(b.intents, next.intents...), starts: append(b.starts, next.starts...),
			owners: append(b.owners, next.owners...)}
	}
	return b
}
