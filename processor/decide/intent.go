package decide

// Intent is one workflow start that one record asks for: the unit the
// ledger claims and the starter starts.
type Intent struct {
	WorkflowID  string
	ActivityID  string
	EventID     string
	IDRule      string
	PayloadHash [32]byte
	Topic       string
	Partition   int32
	Offset      int64
	// Fence is the ownership of the record's partition the claim
	// carries (zero: unfenced, the scheduler's fires).
	Fence Fence
	// Known, when its Intents is not 0, is what the ledger writes with
	// the row this intent's record claims, so that a replay can end the
	// record without deciding it again (processor/known.go); the zero
	// Known writes nothing.
	Known Known `json:",omitzero"`
}

// Known is how a replay knows a record: a digest of the record's bytes,
// coordinates and of what decided it (the deciding configuration and the
// binary), and how many intents that decision had. A replay that meets
// the same digest on as many started rows, each claimed by the record at
// those coordinates, knows the decision it would make again and each
// verdict it would get (duplicate).
type Known struct {
	Digest  [16]byte
	Intents int32
}

// Fence is the ownership a ledger write carries: the consumer group and
// the epoch the ledger gave this router's assignment of the record's
// partition (processor.Ledger.Own). The ledger changes rows for a fenced write only
// while the partition's epoch is still that one, checked in the same
// statement as the write and ordered against the next owner's Own: a
// router that lost the partition (a zombie after a long pause, or a claim
// that was slow or retried across an ordinary revoke) cannot claim,
// re-drive or mark a row after the new owner took over. The zero Fence
// is an unfenced write (the scheduler's fires, which no partition owns).
type Fence struct {
	Group string
	Epoch int64
}

// Fenced says whether the write carries a partition's ownership.
func (f Fence) Fenced() bool { return f.Epoch != 0 }
