package ops

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"sort"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

func lagCommand() command {
	return command{
		name:    "lag",
		summary: "committed offset, end, lag and owner per partition",
		usage:   "--config FILE [--output json]",
		help: `Prints, for every partition of the config's topics, the group's committed offset, the log's
start and end, the lag (end minus committed; with no committed offset, what the group would read
under kafka.reset_offset) and the member that owns the partition now. Under kafka.isolation_level
read_committed, a partition with a transaction still open says so: the group reads nothing past its
first offset (the last stable offset) until it commits or aborts.

Read-only. Exit code 0, 1 when the group has neither members nor committed offsets (it never ran),
2 on an error.`,
		example: `dedup lag --config dedup.yaml`,
		flags: func(fs *flag.FlagSet) func(context.Context, *Tool, []string) (any, int, error) {
			return func(ctx context.Context, t *Tool, args []string) (any, int, error) {
				if len(args) > 0 {
					return nil, ExitError, errors.New("lag takes no arguments")
				}
				return t.Lag(ctx)
			}
		},
	}
}

// LagReport is dedup lag's answer.
type LagReport struct {
	Group      string         `json:"group"`
	State      string         `json:"state"` // the group's state (Stable, Empty, ...); "" when the broker does not know it
	Members    int            `json:"members"`
	Partitions []PartitionLag `json:"partitions"`
	Total      int64          `json:"total_lag"`
}

// PartitionLag is one partition's progress.
type PartitionLag struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Committed *int64 `json:"committed,omitempty"`
	Start     int64  `json:"start"`
	End       int64  `json:"end"`
	Lag       int64  `json:"lag"`
	// Owner is the member consuming the partition (client ID, host and
	// member ID); "" when none does.
	Owner string `json:"owner,omitempty"`
	Note  string `json:"note,omitempty"`
}

// Lag answers dedup lag.
func (t *Tool) Lag(ctx context.Context) (*LagReport, int, error) {
	adm, err := t.kafka()
	if err != nil {
		return nil, ExitError, err
	}
	g := t.cfg.Kafka.Group
	rep := &LagReport{Group: g, Partitions: []PartitionLag{}}
	owners, state, members, err := t.owners(ctx, adm)
	if err != nil {
		return nil, ExitError, err
	}
	rep.State, rep.Members = state, members
	bs, err := t.partitionBounds(ctx, t.cfg.Kafka.Topics...)
	if err != nil {
		return nil, ExitError, err
	}
	cm, err := t.committed(ctx)
	if err != nil {
		return nil, ExitError, err
	}
	anyCommit := false
	for topic, parts := range bs {
		for p, b := range parts {
			pl := PartitionLag{Topic: topic, Partition: p, Start: b.start, End: b.end, Owner: owners[topic][p]}
			c, ok := cm[topic][p]
			switch {
			case ok:
				anyCommit = true
				pl.Committed = &c
				pl.Lag = max(b.end-c, 0)
				if c < b.start {
					pl.Lag = b.end - b.start
					pl.Note = fmt.Sprintf("committed offset is before the log start: records %d..%d left retention unread", c, b.start-1)
				}
			case t.cfg.Kafka.ResetOffset == "earliest":
				pl.Lag = b.end - b.start
				pl.Note = "no committed offset: reads from the log start (reset_offset earliest)"
			default:
				pl.Note = "no committed offset: starts at the log end (reset_offset latest)"
			}
			if b.stable < b.end {
				// Under read_committed the group reads nothing past the
				// last stable offset while that transaction is open.
				open := fmt.Sprintf("a transaction is open from offset %d: the group reads nothing past it until it commits or aborts", b.stable)
				if pl.Note != "" {
					open = pl.Note + "; " + open
				}
				pl.Note = open
			}
			rep.Total += pl.Lag
			rep.Partitions = append(rep.Partitions, pl)
		}
	}
	sort.Slice(rep.Partitions, func(i, j int) bool {
		a, b := rep.Partitions[i], rep.Partitions[j]
		return a.Topic < b.Topic || a.Topic == b.Topic && a.Partition < b.Partition
	})
	if !anyCommit && members == 0 {
		return rep, ExitNotFound, nil
	}
	return rep, ExitFound, nil
}

// owners maps each assigned partition to its member, and says the
// group's state and number of members.
func (t *Tool) owners(ctx context.Context, adm *kadm.Client) (map[string]map[int32]string, string, int, error) {
	g := t.cfg.Kafka.Group
	described, err := adm.DescribeGroups(ctx, g)
	if errors.Is(err, kerr.GroupIDNotFound) {
		return nil, "", 0, nil
	}
	if err != nil {
		return nil, "", 0, fmt.Errorf("describing group %s: %w", g, err)
	}
	d, ok := described[g]
	if !ok || errors.Is(d.Err, kerr.GroupIDNotFound) {
		return nil, "", 0, nil
	}
	if d.Err != nil {
		return nil, "", 0, fmt.Errorf("describing group %s: %w", g, d.Err)
	}
	out := map[string]map[int32]string{}
	for _, m := range d.Members {
		who := fmt.Sprintf("%s@%s (%s)", m.ClientID, m.ClientHost, m.MemberID)
		if a, ok := m.Assigned.AsConsumer(); ok {
			for _, tp := range a.Topics {
				if out[tp.Topic] == nil {
					out[tp.Topic] = map[int32]string{}
				}
				for _, p := range tp.Partitions {
					out[tp.Topic][p] = who
				}
			}
		}
	}
	return out, d.State, len(d.Members), nil
}
