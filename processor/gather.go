package processor

// claimPolls bounds the polls one claim statement takes (gatherPolls).
const claimPolls = 2

// gatherPolls is b with the polls already waiting behind it in q, in poll
// order, up to claimPolls polls: a claimer that fell behind (a replay,
// where the ledger's round trip is the pipeline's slowest step) pays the
// statement's fixed cost once for them, as if they were one poll, and the
// verdicts are the same. A claimer that keeps up finds none waiting and
// claims each poll alone, as soon as it is decided.
//
// A claim never holds one record twice: a poll that reads a partition
// again from at or below b's records of it (the partition moved away and
// came back between the polls, and its records were polled again) is not
// gathered; it is returned as held, the next claim's first.
func gatherPolls(b *claimBatch, q <-chan *claimBatch) (claim, held *claimBatch) {
	for polls := 1; polls < claimPolls; polls++ {
		var next *claimBatch
		select {
		case next = <-q:
		default:
		}
		if next == nil { // none waiting, or q closed
			return b, nil
		}
		if readsAgain(b, next) {
			return b, next
		}
		b = &claimBatch{intents: append(b.intents, next.intents...), starts: append(b.starts, next.starts...),
			owners: append(b.owners, next.owners...)}
	}
	return b, nil
}

// readsAgain reports whether next holds a record of a partition at or
// below the last offset b holds of it.
func readsAgain(b, next *claimBatch) bool {
	last := map[topicPartition]int64{}
	for i := range b.intents {
		in := &b.intents[i]
		tp := topicPartition{in.Topic, in.Partition}
		if off, ok := last[tp]; !ok || in.Offset > off {
			last[tp] = in.Offset
		}
	}
	for i := range next.intents {
		in := &next.intents[i]
		if off, ok := last[topicPartition{in.Topic, in.Partition}]; ok && in.Offset <= off {
			return true
		}
	}
	return false
}

// gatherUndecided is gatherPolls for the settler (Router.settle): an
// undecided poll b with the undecided polls already waiting behind it in
// q, up to claimPolls polls, so that a settler that fell behind reads
// which records are known once for them. A decided poll waiting behind
// (the ledger stopped replaying) is returned as held, as is a poll that
// reads a partition again at or below b's records of it.
func gatherUndecided(b *claimBatch, q <-chan *claimBatch) (settle, held *claimBatch) {
	for polls := 1; polls < claimPolls; polls++ {
		var next *claimBatch
		select {
		case next = <-q:
		default:
		}
		if next == nil {
			return b, nil
		}
		if next.undecided == nil || readsAgainUndecided(b, next) {
			return b, next
		}
		b = &claimBatch{undecided: append(b.undecided, next.undecided...)}
	}
	return b, nil
}

// readsAgainUndecided is readsAgain for undecided polls.
func readsAgainUndecided(b, next *claimBatch) bool {
	last := map[topicPartition]int64{}
	for i := range b.undecided {
		kr := b.undecided[i].kr
		tp := topicPartition{kr.Topic, kr.Partition}
		if off, ok := last[tp]; !ok || kr.Offset > off {
			last[tp] = kr.Offset
		}
	}
	for i := range next.undecided {
		kr := next.undecided[i].kr
		if off, ok := last[topicPartition{kr.Topic, kr.Partition}]; ok && kr.Offset <= off {
			return true
		}
	}
	return false
}
