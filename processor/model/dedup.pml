/*
 * dedup.pml -- SPIN model of dedup's claim -> start -> mark -> commit
 * protocol (Kafka -> PostgreSQL ledger -> Temporal), with a crash, a
 * revoke (rebalance) and a zombie (a replica that lost a partition without
 * knowing it). See README.md in this directory; run ./check.sh.
 *
 * Compile-time switches (spin -D...):
 *   OLD_INBATCH_RULE  the old Claim rule: only the first copy of a workflow
 *                     ID in a batch gets the row's verdict; later same-hash
 *                     copies are DUPLICATE. Expected to violate S1.
 *   LOSS_ONLY         check only that no event is lost for good (S1 when the
 *                     run is over), not S1 nor D at every commit nor the
 *                     pending-row check: gives the --bug run a trail that
 *                     ends in a lost event.
 *   FAILED_ONLY       Temporal reuse policy allow_duplicate_failed_only:
 *                     a run can close failed or completed; a start after a
 *                     failed run creates a new execution; a DUPLICATE
 *                     verdict becomes a check job. Start first, record
 *                     after: the check's LastRun reads the current run L
 *                     (closed? failed? its generation g_L, from the run's
 *                     memo); if L failed, the job starts generation
 *                     max(g_row, g_L) + 1 (g_row: the row's generation, from
 *                     the claim), and the marker records the start with a
 *                     generation guard. No ledger Rerun: a row is pending
 *                     only after a claim's insert. Checks S2g and R.
 *   RERUN_FIRST       (FAILED_ONLY) the protocol before: LastRun, then the
 *                     ledger's Rerun compare-and-set (row pending,
 *                     generation + 1), then the start of the row's
 *                     generation; MarkStarted on pending rows only. Violates
 *                     E2 and L (gap 2b: a re-run orphaned after its Rerun).
 *   NO_REQUEST_ID     Temporal ignores the start's request ID (the
 *                     generation): the reuse policy alone decides. With
 *                     FAILED_ONLY, expected to violate S2g.
 *   NFAIL=n           (FAILED_ONLY) runs that may close failed (default 1).
 *   PRE_GAP2_FIX      (FAILED_ONLY, RERUN_FIRST) startPool before the gap-2
 *                     fix: a check that runs nothing again finishes its
 *                     NEW/REDRIVE waiters (no startReq), a taken-over check
 *                     becomes a start of the check's request.
 *   NO_ORPHAN_RERUN   (FAILED_ONLY, RERUN_FIRST) an orphaned Rerun never lands.
 *   GAP1_OK           (FAILED_ONLY) a run created by a start of an older
 *                     generation than the current (failed) run's (gap 1) is
 *                     let through instead of failing S2g, so that a search
 *                     with NFAIL=2 checks everything else.
 *   Mutations of the start-first protocol (FAILED_ONLY; each must make a
 *   search fail or is reported as harmless in README.md):
 *   MUT_MARK_PENDING_ONLY  the marker moves pending rows only (no
 *                     "started AND generation < next" case).
 *   MUT_MARK_NO_GUARD the marker overwrites a started row's run and
 *                     generation whatever its generation.
 *   MUT_NEXT_FROM_ROW next = g_row + 1 (LastRun's generation ignored, as
 *                     for runs made before the memo: g_L = 0).
 *   MUT_NEXT_FROM_RUN next = g_L + 1 (the claim's generation ignored).
 *   W4                4 records (p0: [A, A''], p1: [B, A']) instead of 3.
 *   W2                2 records (p0: [A], p1: [B]): no re-send of A.
 *   WA                2 records (p0: [A], p1: [A']): the event and its
 *                     cross-partition re-send, no conflicting copy (the
 *                     signal searches of make model).
 *   TXN               transactional workload, 4 log entries (p0: [X, M],
 *                     p1: [A, C]): X (hash B) belongs to an aborted
 *                     transaction, M is its abort marker, C the commit
 *                     marker of A's transaction. Read with read_committed:
 *                     a poll never returns X; markers are returned and
 *                     finish at once. Checks I (an aborted record is never
 *                     claimed) and, through E, that the committed offsets
 *                     reach the log ends past the markers.
 *   READ_UNCOMMITTED  (TXN) the old isolation: aborted records are polled,
 *                     claimed and started. Expected to violate I.
 *   NO_CONTROL        (TXN) markers are not returned to the router (kgo's
 *                     default without KeepControlRecords): expected to end
 *                     in an invalid end state (a partition never committed
 *                     to its end).
 *   OLD_COMMIT        the old commit: the ticker's commit (a: read the
 *                     finished prefix, b: read the group's committed
 *                     offsets, c: send) and the revoke's commit interleave
 *                     (no per-replica commit lock), and the send does not
 *                     leave out a partition no longer owned. Expected to
 *                     violate M (a committed offset goes backwards).
 *   PERM              Temporal refuses every start of the workflow ID for
 *                     good (temporal_permanent): the owner is written to the
 *                     dead-letter topic, then the row is marked
 *                     dead_lettered, then the owner and its waiters finish.
 *                     A dead_lettered row is re-claimed (pending, REDRIVE)
 *                     by a copy with its payload. Not with FAILED_ONLY.
 *   OLD_DL_FINISH     (PERM) the old rule: the owner finishes right after
 *                     the dead-letter write, MarkDeadLettered is best effort
 *                     (abandoned when the partition goes away) and the
 *                     waiters finish after it. Expected to violate D.
 *   OLD_CHECK_WAIT    (FAILED_ONLY) the old coalescing of check copies: a
 *                     DUPLICATE copy waits plainly on any job in flight,
 *                     even one past its LastRun read. Expected to violate
 *                     RC.
 *   ATOMIC_COMMIT     the ticker's commit (a)-(c) in one step (the fixed
 *                     rule only): the failed-only searches use it to stay
 *                     in memory (README.md says why it loses nothing there).
 *   D_OFF             drop D (a committed record's row is started or
 *                     dead_lettered), so that a search checks E2 alone.
 *   E2_OFF            drop E2 (as before; D stays).
 *   NOHIDE            no hidden variables (pan refuses -DBFS with them):
 *                     check.sh's breadth-first violation searches.
 *   NCRASH=n NREVOKE=n NZOMBIE=n NTIMEOUT=n   fault budgets (default 1).
 *   NO_FENCE          the ledger without its fence (before migration 00013):
 *                     no partition epochs, no Own step; a zombie's or an
 *                     orphaned job's claim and marks always write. With
 *                     PERM and a zombie, expected to violate E2 (a zombie's
 *                     claim takes a dead_lettered row back to pending).
 *
 *   ZOMBIE_IN_OWN     (fence) the zombie fault may also strike a replica
 *                     whose Own of the partition has not landed yet (its
 *                     assignment callback, or a re-take's Own, still in
 *                     the ledger): its late Own takes nothing (an older
 *                     generation); with NO_GEN_OWN it fences the new owner
 *                     out of the partition, whose re-take (below) takes it
 *                     back. With NO_RETAKE NO_GEN_OWN expected to end in
 *                     an invalid end state (E).
 *   NO_RETAKE         (fence) the fence without the re-take: a replica
 *                     refused by the fence forgets the partition whatever
 *                     the group coordinator says (committer.fenced before
 *                     80f078a).
 *   NO_GEN_OWN        (fence) the Own without the group generation (before
 *                     aabf886): every Own takes the partition. With PERM
 *                     and ZOMBIE_IN_OWN expected to violate E2 (a zombie's
 *                     late Own makes it the owner; its claim takes a
 *                     dead_lettered row back to pending).
 *
 *   The fence (default): the ledger keeps an epoch per partition
 *   (dedup_partition_owners); a replica assigned a partition takes a new
 *   epoch (Ledger.Own, a step of its own in the assignment callback) before
 *   it can poll it, and every claim and mark carries the epoch of its
 *   record's partition; a stale one writes nothing (the claim: nothing of
 *   the batch; a mark: not that row). The re-take (committer.fenced): the
 *   replica asks the group coordinator whether it still assigns it the
 *   partition; if so it takes the partition again (a new Own, a step of its
 *   own) and sends the refused writes again under the new epoch, else it
 *   forgets the partition. The generation (aabf886): the owner row keeps
 *   the group generation of the Own that took it (lgo); an assignment's
 *   Own carries the generation the replica was assigned the partition in
 *   and takes it only if the stored one is not later, else it takes
 *   nothing: the replica asks the coordinator and Owns again Confirmed
 *   (whatever the stored generation) if it still assigns it the
 *   partition, else it does not take the partition (forgets it). The
 *   re-take's Own is Confirmed.
 *
 *   SIGNAL            a route of mode signal: the job of a claim delivers
 *                     the event to its entity workflow instead of starting
 *                     a workflow. The ledger row is keyed by the delivery
 *                     key (entity workflow ID + event ID; NWID = 1: one
 *                     event, one entity workflow); claim, coalescing,
 *                     mark and commit are the starts' (reject_duplicate:
 *                     a DUPLICATE copy is finished). The deliver step is
 *                     SignalWithStart with a request ID derived from the
 *                     delivery key. Temporal (the entity proctype):
 *                     an open run dedups that request ID (its mutable
 *                     state's signal requested IDs); a closed run or none
 *                     makes SignalWithStart start a new run (with the
 *                     request ID in its set); continue-as-new starts a run
 *                     with a fresh set. The entity workflow handles each
 *                     accepted signal in a step of its own: it drops an
 *                     event ID its seen-set holds, else admits it
 *                     (observed) and adds it; the seen-set is carried
 *                     across continue-as-new, not to a new run after the
 *                     close. Checks SD (a committed record's event was
 *                     delivered), SO (observed at most once) and, when all
 *                     is over, exactly once. Not with FAILED_ONLY, PERM,
 *                     TXN.
 *   NCAN=n NCLOSE=n NDROP=n   (SIGNAL) continues-as-new of the entity
 *                     workflow (default 1), closes (completed; default 0:
 *                     a known hole, README.md), evictions of the event ID
 *                     from the seen-set by its bound (default 0).
 *   SIG_NO_REQID      (SIGNAL) no request ID (a fresh one per call):
 *                     Temporal accepts every SignalWithStart.
 *   SIG_NO_WFDEDUP    (SIGNAL) no seen-set: the entity workflow admits
 *                     every signal it handles. Expected to violate SO
 *                     (continue-as-new, then a re-drive).
 *   SIG_UNDRAINED     (SIGNAL) the entity workflow may continue as new or
 *                     complete with accepted signals it has not handled
 *                     (they are lost). Expected to fail "exactly once".
 *   RUNLIMIT          (SIGNAL) the entity's run may reach Temporal's signal
 *                     limit (history.maximumSignalsPerExecution, counted
 *                     over other events' signals too): the entity's run is
 *                     open from the start (other events), a step of its
 *                     own fills it (NLIMIT times, default 1) while a
 *                     continue-as-new is still to come (the Receiver of
 *                     worker/signals continues as new at MaxSeen handled
 *                     events, below the server's limit: the defaults), and
 *                     Temporal refuses every delivery to a full run,
 *                     before it looks at the request ID. The refusal is
 *                     transient (sink/starter/runlimits.go: the runGate
 *                     holds the delivery, then RunLimitError, retried):
 *                     the job stays in its start phase; continue-as-new
 *                     empties the count. Checks that the event is neither
 *                     lost nor doubled: "exactly once" at the end.
 *   RUNLIMIT_PERM     (RUNLIMIT) the old rule: the refusal is permanent
 *                     (InvalidArgument): the owner is dead-lettered, the
 *                     row marked dead_lettered (one step here: the two
 *                     steps of startPool.deadLetter change nothing the
 *                     property reads), owner and waiters finished. A copy
 *                     with the row's payload claims it again (as PERM).
 *                     Expected to fail "exactly once": the event lost.
 *   REPLAY            (PERM) dlq replay round trips, the event's ID by the
 *                     coordinates rule: p0 holds the event A (p1 is empty)
 *                     and NREPLAY=2 slots after it. The start is refused
 *                     for good until the operator fixes the cause (a step,
 *                     once); a refused start is dead-lettered as in PERM.
 *                     The operator (a proctype) replays any dead letter,
 *                     any number of times (NREPLAY in all; the whole
 *                     topic twice included): the copy is appended to p0
 *                     with the dead letter's origin (dedup-origin-*), and
 *                     the router's event ID of the copy is that origin
 *                     (rorg). A replayed copy may be refused and
 *                     dead-lettered again, and replayed again. Checks
 *                     that the event is not doubled: every copy is
 *                     claimed under the event's own ID (rorg == 0: one
 *                     workflow ID, one ledger row, at most one run by S2;
 *                     a copy under another ID would be a new row and a
 *                     second run), and not lost: S1, D and E2 of PERM
 *                     for every copy (each committed copy ran or is in
 *                     the dead-letter topic, to be replayed again).
 *   REPLAY_DROP_ORIGIN  (REPLAY) the old rule: a replayed copy's dead
 *                     letter does not keep the copy's dedup-origin-*, so
 *                     the next replay sets the copy's own coordinates as
 *                     its origin. Expected to fail: a copy claimed under
 *                     another event ID (doubled).
 *
 * Every action is one atomic step (d_step): a ledger statement, a Temporal
 * call, one of the three parts of a broker commit, a rebalance. Replicas
 * interleave at those steps.
 */

#if defined(PERM) && defined(FAILED_ONLY)
#error "PERM is modelled under reject_duplicate only"
#endif
#if defined(SIGNAL) && (defined(FAILED_ONLY) || defined(PERM) || defined(TXN))
#error "SIGNAL is modelled without FAILED_ONLY, PERM and TXN"
#endif
#if defined(REPLAY) && (!defined(PERM) || defined(W4) || defined(W2) || defined(WA) || defined(TXN))
#error "REPLAY is modelled with PERM, on its own workload"
#endif
#if defined(REPLAY_DROP_ORIGIN) && !defined(REPLAY)
#error "REPLAY_DROP_ORIGIN needs REPLAY"
#endif
#if defined(RUNLIMIT) && !defined(SIGNAL)
#error "RUNLIMIT is a limit of signals: with SIGNAL only"
#endif
#if defined(RUNLIMIT_PERM) && !defined(RUNLIMIT)
#error "RUNLIMIT_PERM needs RUNLIMIT"
#endif

#define NR    2   /* replicas */
#define NP    2   /* partitions */
#if defined(W4) || defined(TXN)
#define NREC  4   /* records in all partitions (TXN: log entries, markers included) */
#elif defined(W2) || defined(WA)
#define NREC  2
#elif defined(REPLAY)
#define NREC  3   /* the event and NREPLAY (2) replayed copies, all in p0 */
#else
#define NREC  3
#endif
#define NWID  1   /* workflow IDs (all records carry one event ID) */

#if !defined(NO_FENCE) && !defined(NO_RETAKE)
#define RETAKE    /* committer.fenced re-takes a partition the coordinator still assigns */
#endif
#if !defined(NO_FENCE) && !defined(NO_GEN_OWN)
#define GEN_OWN   /* Ledger.Own carries the group generation (Ownership.Generation) */
#endif

/* record status in one replica's tracker */
#define S_NONE 0  /* not polled (or abandoned, or committed and forgotten) */
#define S_INFL 1  /* polled, in flight (claim / start owner / waiter)   */
#define S_DLQ  2  /* conflict verdict, dead-letter write pending         */
#define S_FIN  3  /* finished                                            */

/* ledger row state */
#define L_NONE    0
#define L_PENDING 1
#define L_STARTED 2
#define L_DEAD    3 /* dead_lettered (PERM) */

/* start job phase */
#define J_NONE  0
#define J_START 1 /* queued / calling Temporal (retried)      */
#define J_MARK  2 /* Temporal said started; waiting for mark   */
#define J_CHECK 3 /* check job (DUPLICATE, FAILED_ONLY): LastRun */
#define J_RERUN 4 /* (RERUN_FIRST) check job: last run failed; ledger Rerun */
#define J_LR    5 /* check job whose LastRun call has begun (FAILED_ONLY) */
#define J_DLW   6 /* (PERM) start refused for good: dead-letter write of the owner */
#define J_MDL   7 /* (PERM) written: ledger MarkDeadLettered */

/* Temporal execution state (FAILED_ONLY) */
#define X_NONE      0
#define X_RUNNING   1
#define X_COMPLETED 2
#define X_FAILED    3

mtype = { A, B };       /* payload hashes */

/* hidden: not in the state vector. pan cannot search breadth-first (-DBFS)
 * with hidden variables: check.sh's violation searches give spin -DNOHIDE */
#ifdef NOHIDE
#define hidden
#endif

/* ---- Kafka log: constant after init, so hidden ---- */
#ifdef REPLAY
byte plen[NP];          /* records per partition (REPLAY: p0 grows) */
byte rorg[NREC];        /* the record's origin offset in p0 (dedup-origin-*,
                         * or its own): its coordinates-rule event ID */
byte nrep = 2;          /* replays left (NREPLAY) */
bit  fixed;             /* the operator fixed the cause of the refusals */
bit  rdone;             /* the operator is done */
#else
hidden byte plen[NP];   /* records per partition */
#endif
hidden byte pbase[NP];  /* index of a partition's first record */
hidden byte rpart[NREC]; /* partition of a record */
hidden byte roff[NREC]; /* offset of a record */
hidden byte rwid[NREC]; /* workflow ID = f(event id) */
hidden mtype rhash[NREC]; /* payload hash */
#ifdef TXN
hidden byte abrt[NREC]; /* the record belongs to an aborted transaction (hidden: no bit) */
hidden byte ctl[NREC];  /* a control record (transaction marker) */
hidden byte avl[NREC];  /* records a poll can return at and after this offset */
#endif

/* ---- broker ---- */
byte committed[NP];     /* committed offset */
byte bgen[NP];          /* group generation of the partition's owner */

/* ---- ledger (PostgreSQL) ---- */
byte  lst[NWID];        /* row state */
byte  lgen[NWID];       /* row generation (1 at insert; mark: greatest(generation,
                         * the start's); RERUN_FIRST: Rerun +1) */
#ifdef RERUN_FIRST
byte  lrun[NWID];       /* row run_id: run number (1..exec), 0 = NULL (read by Rerun's
                         * compare-and-set; the start-first protocol never reads
                         * it back, so the model does not keep it) */
#endif
mtype lhash[NWID];      /* row payload hash */
#if defined(PERM) || defined(RUNLIMIT_PERM)
bit   rcl[NWID];        /* history for D: a copy re-claimed the row from
                         * dead_lettered (pending again) since it was last
                         * marked dead_lettered */
#endif
bit   cfl[NREC];        /* dedup_conflicts row for the record */
#ifdef KNOWN
byte  lrec[NWID];       /* the record whose claim inserted the row, + 1: the
                         * coordinates and the digest (record_digest) the
                         * insert wrote (processor/known.go) */
#endif
#ifndef NO_FENCE
byte  lep[NP];          /* the fence: dedup_partition_owners' epoch of the
                         * partition, bumped by Ledger.Own */
#endif
#ifdef GEN_OWN
byte  lgo[NP];          /* dedup_partition_owners.generation: the group generation
                         * of the Own that took the partition (lgen_own) */
#endif

/* ---- Temporal ---- */
byte exec[NWID];        /* executions created for the workflow ID; run n is the n-th */
byte xgen[NWID];        /* request ID (generation) of the current (latest) run; with
                         * FAILED_ONLY also its memo, which LastRun reads (g_L) */
#ifdef FAILED_ONLY
byte xlast[NWID];       /* state of the latest execution */
byte xgens[NWID];       /* bit g: some run was created by a start of generation g (S2g) */
#ifndef NFAIL
#define NFAIL 1
#endif
byte nfail = NFAIL;     /* executions that may close as failed */
#endif

#ifdef SIGNAL
/* ---- Temporal: the entity workflow of the event (SIGNAL) ---- */
#ifndef NCAN
#define NCAN 1          /* continues-as-new */
#endif
#ifndef NCLOSE
#define NCLOSE 0        /* closes (completed): 1 shows the known hole */
#endif
#ifndef NDROP
#define NDROP 0         /* the seen-set's bound evicts the event ID */
#endif
bit  eopen;             /* the entity workflow has an open run */
bit  erid;              /* the open run's mutable state holds the delivery's
                         * request ID (its signal requested IDs) */
bit  eseen;             /* the entity workflow's seen-set holds the event ID */
byte epend;             /* signals of the event the open run accepted and the
                         * workflow has not handled yet */
byte ncan = NCAN;
byte nclose = NCLOSE;
#ifdef RUNLIMIT
#ifndef NLIMIT
#define NLIMIT 1         /* times the open run reaches the signal limit */
#endif
bit  efull;             /* the open run is at history.maximumSignalsPerExecution */
byte nlimit = NLIMIT;
#define FULL (eopen && efull)
#else
#define FULL 0
#endif
byte ndrop = NDROP;
/* history, for SD, SO and "exactly once" */
bit  dlv;               /* a run accepted a signal of the event: delivered */
byte nobs;              /* times the entity workflow admitted the event: observed */
byte nend;              /* replicas whose run is over */
#endif

/* ---- dead-letter topic ---- */
bit dlw[NREC];          /* record written to the dead-letter topic */

/* ---- history, for S3 ---- */
bit fin[NREC];          /* some replica finished the record */

/* ---- fault budgets (override with spin -DNCRASH=0 etc.) ---- */
#ifndef NCRASH
#define NCRASH 1        /* replica crashes (at most 1: there are 2 replicas) */
#endif
#ifndef NREVOKE
#define NREVOKE 1       /* cooperative rebalances moving one partition */
#endif
#ifndef NZOMBIE
#define NZOMBIE 1       /* partitions moved without the old owner knowing */
#endif
#ifndef NRESTART
#define NRESTART 1      /* a crashed replica restarts and rejoins the group */
#endif
#ifndef NTIMEOUT
#define NTIMEOUT 1      /* start calls that time out after creating */
#endif
byte ncrash = NCRASH;
byte nrev = NREVOKE;
byte nzom = NZOMBIE;
byte ntmo = NTIMEOUT;
byte nrestart = NRESTART;

/* ---- replicas (in-memory state, lost on crash) ---- */
typedef Rep {
	bit  alive;
	bit  own[NP];       /* the replica believes it owns the partition */
	byte gen[NP];       /* generation it got the partition in */
#ifndef NO_FENCE
	byte ep[NP];        /* the fence: the epoch its Own took for this
	                     * assignment (partition.fence); 0 = not taken yet */
	byte jep[NWID];     /* the fence the job's marks carry: the epoch of
	                     * its owner record's partition at the owner's
	                     * claim (j.rec.part.fence), moved on by a re-take */
#endif
#ifdef RETAKE
	byte rog[NP];       /* a re-take's Own of the partition is in flight
	                     * (committer.fenced, between the coordinator's answer
	                     * and c.own's return): the generation of the
	                     * assignment it is for (0 = none) */
	byte rb;            /* the claimer's batch waiting in committer.fenced
	                     * for the re-take's Own, to be claimed again (a bit
	                     * per record) */
#endif
	byte pos[NP];       /* next offset to poll */
	byte cmt[NP];       /* committer: where the partition's finished prefix
	                     * starts: the committed offset at assignment, then
	                     * the offset of our last accepted commit
	                     * (partition.committed) */
	byte tph;           /* the ticker's commit in progress: 0 none, 1 prefix
	                     * read (a), 2 group's offsets read (b), send (c) next */
	bit  tpart;         /* its partition (one partition per commit) */
	byte toff;          /* its offset, read at (a) */
	bit  tlo[NP];       /* the ticker's last commit of the partition was left
	                     * out at (b) and nothing of it changed since (no
	                     * record finished, no new assignment): the ticker
	                     * does not read it again, since a repeat would be left
	                     * out again (the group's offset only grows). Go's
	                     * ticker repeats it every CommitInterval; in the model
	                     * the repeats would be a cycle of stutter steps that
	                     * keeps the replica's other steps from running under
	                     * weak fairness (the ticker is a goroutine of its own
	                     * in Go, an action of the replica here) */
	byte st[NREC];      /* tracker: record status */
	bit  dlpend;        /* a claim's conflicts are being dead-lettered */
	byte jph[NWID];     /* startPool.starting[wid]: job phase */
	byte jgen[NWID];    /* job's req.Generation (its request ID) */
	byte jrun[NWID];    /* run ID: from Start (J_MARK) or LastRun (J_RERUN); a re-run's
	                     * start (J_START after a check): the failed run L it replaces (R) */
	byte jsreq[NWID];   /* check job (J_CHECK/J_RERUN): job.startReq, the generation of
	                     * the first NEW/REDRIVE copy that waits on it (0 = nil) */
	byte jown[NWID];    /* job's record */
	byte jwait[NWID];   /* waiters (bit per record) */
	byte jorph[NWID];   /* job's record's partition was revoked/lost (its context
	                     * cancelled): 1 = a call in flight may still land,
	                     * 2 = it did; every later call fails at once */
#if defined(FAILED_ONLY) && !defined(RERUN_FIRST)
	byte jrck[NWID];    /* re-check waiters (bit per record): check copies that
	                     * found the job past its LastRun read; submitted again
	                     * as checks when the job ends */
	byte jneed[NWID];   /* history for RC: the newest failed run that a check
	                     * copy of the job (owner or plain waiter) saw at its
	                     * claim (0: none); the job must end with a newer run */
	byte rneed[NWID];   /* the same for the re-check waiters */
#endif
};
Rep rep[NR];

/* scratch for d_steps: hidden (not in the state vector; every d_step sets
 * what it reads, and resets it to 0 as well) */
hidden byte nb, i_, o_, c_, w_, f_, x_, p_, k_, m_, j_, sg_, sn_;
hidden byte b[NREC];

/* ================= helpers ================= */

inline finish(r, c) {
	rep[r].st[c] = S_FIN;
	rep[r].tlo[rpart[c]] = 0;
	fin[c] = 1
}

/* the job's fence: its owner record c's partition's (j.rec.part.fence) */
#ifndef NO_FENCE
#define JEP(r, w, c) rep[r].jep[w] = rep[r].ep[rpart[c]]
#else
#define JEP(r, w, c) skip
#endif

/* processor.(*startPool).submit: one rule for same batch and later batch,
 * for starts (J_START, generation g) and checks (J_CHECK) alike */
inline coalesce(r, c, w, ph, g) {
	if
	:: rep[r].jph[w] != J_NONE ->
		rep[r].jwait[w] = rep[r].jwait[w] | (1 << c);
		printf("MSC: r%d   rec%d waits on the in-flight job (owner rec%d)\n", r, c, rep[r].jown[w]);
		/* j.check && !check && j.startReq == nil: record the start it needs */
		if
		:: (rep[r].jph[w] == J_CHECK || rep[r].jph[w] == J_LR || rep[r].jph[w] == J_RERUN) && ph == J_START && rep[r].jsreq[w] == 0 ->
			rep[r].jsreq[w] = g;
			printf("MSC: r%d   the check job records rec%d's start (generation %d)\n", r, c, g)
		:: else
		fi
	:: else ->
		rep[r].jph[w] = ph; rep[r].jgen[w] = g; rep[r].jown[w] = c; rep[r].jorph[w] = 0; JEP(r, w, c);
		printf("MSC: r%d   rec%d owns a new job (phase %d, generation %d)\n", r, c, ph, g)
	fi
}

#if defined(FAILED_ONLY) && !defined(RERUN_FIRST)
#define RAISE(v, n) if :: v < n -> v = n :: else fi
/* processor.(*startPool).submit(rec, req, check=true) of a check copy c
 * (generation g; n: the newest run, if it had failed at c's claim, else
 * 0): c owns a new check job; or waits plainly on a check job whose
 * LastRun has not begun (that read comes after c's claim); or, on a job
 * past that point (a start, a re-run's start, a check whose LastRun
 * began), it becomes a re-check waiter, submitted again as a check when
 * that job ends. -DOLD_CHECK_WAIT: it always waits plainly. */
inline checkcopy(r, c, w, g, n) {
	if
	:: rep[r].jph[w] == J_NONE ->
		rep[r].jph[w] = J_CHECK; rep[r].jgen[w] = g; rep[r].jown[w] = c; rep[r].jorph[w] = 0; JEP(r, w, c);
		RAISE(rep[r].jneed[w], n);
		printf("MSC: r%d   rec%d owns a new check job (generation %d)\n", r, c, g)
#ifndef OLD_CHECK_WAIT
	:: rep[r].jph[w] == J_CHECK ->
#else
	:: rep[r].jph[w] != J_NONE ->
#endif
		rep[r].jwait[w] = rep[r].jwait[w] | (1 << c);
		RAISE(rep[r].jneed[w], n);
		printf("MSC: r%d   rec%d waits on the in-flight job (owner rec%d, phase %d)\n", r, c, rep[r].jown[w], rep[r].jph[w])
#ifndef OLD_CHECK_WAIT
	:: rep[r].jph[w] != J_NONE && rep[r].jph[w] != J_CHECK ->
		rep[r].jrck[w] = rep[r].jrck[w] | (1 << c);
		RAISE(rep[r].rneed[w], n);
		printf("MSC: r%d   rec%d: the job in flight (owner rec%d, phase %d) is past its LastRun read: re-check waiter\n", r, c, rep[r].jown[w], rep[r].jph[w])
#endif
	fi
}

/* the job of wid w ended (cleared): its re-check waiters (mask m_, need
 * sn_) are submitted again as checks with the job's request (generation
 * sg_), in record order: the first owns a new check job (its LastRun comes
 * after the ended job's run exists), the others wait on it */
inline resubmit(r, w) {
	for (j_ : 0 .. NREC-1) {
		if
		:: m_ & (1 << j_) ->
			printf("MSC: r%d   re-check waiter rec%d submitted again as a check\n", r, j_);
			checkcopy(r, j_, w, sg_, sn_)
		:: else
		fi
	}
	j_ = 0; m_ = 0; sg_ = 0; sn_ = 0
}
#endif

/* the verdict of the row for a same-hash copy (processor.(*claimer).claim) */
inline rowverdict(r, c, w) {
	if
	:: lst[w] == L_PENDING ->
		printf("MSC: r%d   rec%d %e -> NEW/REDRIVE generation %d\n", r, c, rhash[c], lgen[w]);
		coalesce(r, c, w, J_START, lgen[w])
	:: else ->
#ifdef FAILED_ONLY
#ifdef RERUN_FIRST
		/* DUPLICATE on a route whose policy is not reject_duplicate: a check
		 * job; its req.Generation is 0, whose request ID is generation 1's */
		printf("MSC: r%d   rec%d %e -> DUPLICATE: check job\n", r, c, rhash[c]);
		coalesce(r, c, w, J_CHECK, 1)
#else
		/* DUPLICATE on a route whose policy is not reject_duplicate: a check
		 * job; its req.Generation is the row's (g_row, from the claim) */
		printf("MSC: r%d   rec%d %e -> DUPLICATE: check (row generation %d)\n", r, c, rhash[c], lgen[w]);
		if
		:: xlast[w] == X_FAILED -> x_ = exec[w]
		:: else -> x_ = 0
		fi;
		checkcopy(r, c, w, lgen[w], x_);
		x_ = 0
#endif
#else
		printf("MSC: r%d   rec%d %e -> DUPLICATE (finished)\n", r, c, rhash[c]);
		finish(r, c)
#endif
	fi
}

#ifdef TXN
/* a poll does not return the record: aborted (read_committed), or a
 * marker that the client drops (NO_CONTROL) */
#if defined(NO_CONTROL) && defined(READ_UNCOMMITTED)
#define SKIPPED(c) (ctl[c])
#elif defined(NO_CONTROL)
#define SKIPPED(c) (abrt[c] || ctl[c])
#elif defined(READ_UNCOMMITTED)
#define SKIPPED(c) 0
#else
#define SKIPPED(c) (abrt[c])
#endif
/* not an event: never claimed, left out of S1 and S3 */
#define NOTEV(c) (ctl[c] || SKIPPED(c))
#elif defined(REPLAY)
#define SKIPPED(c) 0
/* a slot not yet written by a replay is no record */
#define NOTEV(c) (roff[c] >= plen[rpart[c]])
#else
#define SKIPPED(c) 0
#define NOTEV(c) 0
#endif

/* poll k records of partition p into the batch (TXN: a skipped record is
 * not returned; a marker is returned and finishes at once) */
inline take(r, p, k) {
	i_ = 0;
	do
	:: i_ < k ->
		c_ = pbase[p] + rep[r].pos[p];
		rep[r].pos[p]++;
#ifdef TXN
		if
		:: SKIPPED(c_) ->
			printf("MSC: r%d   the poll skips p%d@%d (aborted or marker)\n", r, p, roff[c_])
		:: !SKIPPED(c_) && ctl[c_] ->
			printf("MSC: r%d   polls p%d@%d, a transaction marker: finished\n", r, p, roff[c_]);
			finish(r, c_); i_++
		:: !SKIPPED(c_) && !ctl[c_] ->
			assert(!abrt[c_]);   /* I: an aborted record is never claimed */
#endif
			b[nb] = c_; nb++;
			rep[r].st[c_] = S_INFL;
			printf("MSC: r%d   polls rec%d = p%d@%d hash %e\n", r, c_, p, roff[c_], rhash[c_]);
			i_++
#ifdef TXN
		fi
#endif
	:: else -> break
	od
}

#ifdef KNOWN
/* processor/known.go, Router.settle: while the ledger replays, a polled
 * record whose row is started and was inserted by the record itself (its
 * coordinates and digest: KnownLedger.Known) is finished without a claim,
 * as its duplicate would have been; the others are claimed. The read
 * changes no row and a started row never changes state, so the read and
 * the claim of the rest may be one step. Two mutations: -DKNOWN_ANY_COPY
 * drops the coordinates and digest (a row started by any copy), and
 * -DKNOWN_PENDING the row's state (a row the record claimed, started or
 * not) */
#ifdef KNOWN_ANY_COPY
#define KNOWNREC(c) (lst[rwid[c]] == L_STARTED)
#elif defined(KNOWN_PENDING)
#define KNOWNREC(c) (lst[rwid[c]] != L_NONE && lrec[rwid[c]] == (c) + 1)
#else
#define KNOWNREC(c) (lst[rwid[c]] == L_STARTED && lrec[rwid[c]] == (c) + 1)
#endif
inline known(r) {
	j_ = 0;
	for (i_ : 0 .. nb-1) {
		c_ = b[i_];
		if
		:: KNOWNREC(c_) ->
			printf("MSC: r%d   rec%d is known (its row started, written by it): finished, not claimed\n", r, c_);
			finish(r, c_)
		:: else ->
			b[j_] = c_; j_++
		fi
	}
	for (i_ : j_ .. NREC-1) { b[i_] = 0 }
	nb = j_; j_ = 0; i_ = 0; c_ = 0
}
#endif

/* ledger (*Postgres).Claim: one transaction, rows locked */
inline claim(r) {
	for (w_ : 0 .. NWID-1) {
		f_ = 255;
		for (i_ : 0 .. nb-1) {
			if
			:: f_ == 255 && rwid[b[i_]] == w_ -> f_ = i_
			:: else
			fi
		}
		if
		:: f_ != 255 ->
			if
			:: lst[w_] == L_NONE ->
				lst[w_] = L_PENDING; lhash[w_] = rhash[b[f_]]; lgen[w_] = 1;
#ifdef KNOWN
				lrec[w_] = b[f_] + 1;
#endif
				printf("MSC: r%d   ledger: insert row wid%d pending hash %e\n", r, w_, lhash[w_])
			:: else
			fi;
			for (i_ : 0 .. nb-1) {
				c_ = b[i_];
				if
				:: rwid[c_] != w_ -> skip
				:: rwid[c_] == w_ && rhash[c_] != lhash[w_] ->
					cfl[c_] = 1; rep[r].st[c_] = S_DLQ; rep[r].dlpend = 1;
					printf("MSC: r%d   rec%d %e -> CONFLICT (row has %e)\n", r, c_, rhash[c_], lhash[w_])
				:: rwid[c_] == w_ && rhash[c_] == lhash[w_] ->
#ifdef REPLAY
					/* not doubled: the copy's coordinates-rule ID is the
					 * event's (another would be another row, another run) */
					printf("MSC: r%d   rec%d's event ID: origin p0@%d\n", r, c_, rorg[c_]);
					assert(rorg[c_] == 0);
#endif
#if defined(PERM) || defined(RUNLIMIT_PERM)
					/* a dead_lettered row with the copy's payload is
					 * claimed again: pending (attempts + 1) */
					if
					:: lst[w_] == L_DEAD ->
						lst[w_] = L_PENDING; rcl[w_] = 1;
						printf("MSC: r%d   ledger: row wid%d dead_lettered -> pending (re-claimed)\n", r, w_)
					:: else
					fi;
#endif
#ifdef OLD_INBATCH_RULE
					if
					:: i_ != f_ ->
						printf("MSC: r%d   rec%d %e -> DUPLICATE of the batch's first copy (OLD RULE, finished)\n", r, c_, rhash[c_]);
						finish(r, c_)
					:: else ->
						rowverdict(r, c_, w_)
					fi
#else
					rowverdict(r, c_, w_)
#endif
				fi
			}
		:: else
		fi
	}
}

/* the coordinator still assigns p to r (DescribeGroups: r is a current
 * member and p is in its assignment) */
#define MINE(r, p) (rep[r].own[p] && rep[r].gen[p] == bgen[p])

/* a claim statement refused by the fence: m_ names the stale partitions
 * of the batch b (FencedError). claimer.claim -> committer.fenced: a
 * partition whose re-take is already in flight (the marker's, holding
 * fenceMu) is waited for; one the group coordinator still assigns to r is
 * taken again (its Own, a step of its own, below); any other is forgotten
 * as the lost step does (abandon, its polled records too). With a re-take
 * the claimer waits in fenced for the Own and claims the rest of the
 * batch (the refused intents with the new fence and the others) after it
 * (the re-claim step); else it claims the rest at once, a new statement.
 * -DNO_RETAKE: every stale partition is forgotten. Refusal and the
 * coordinator's answer are one step: the refusal reads only the ledger's
 * epochs, the answer only the group's assignment, so a step between them
 * that writes the group (a rebalance, a zombie move, a crash) can be put
 * before the refusal, and one that writes the epochs (another's Own) after
 * the answer, where the model has it (README.md) */
inline fencedclaim(r) {
	printf("MSC: r%d   ledger fence: the claim is refused, nothing written (stale: p0 %d, p1 %d; epochs now %d, %d)\n", r,
		m_ & 1, (m_ >> 1) & 1, lep[0], lep[1]);
	x_ = 0; f_ = 0;
	for (p_ : 0 .. NP-1) {
		if
		:: m_ & (1 << p_) ->
			if
#ifdef RETAKE
			:: rep[r].own[p_] && rep[r].rog[p_] == rep[r].gen[p_] ->
				printf("MSC: r%d   waits for its re-take of p%d (the marker's, in flight)\n", r, p_);
				f_ = 1
			:: rep[r].rog[p_] == 0 && MINE(r, p_) ->
				printf("MSC: r%d   the coordinator still assigns p%d to r%d: takes it again (its Own in flight)\n", r, p_, r);
				rep[r].rog[p_] = rep[r].gen[p_]; f_ = 1
			:: else ->
#else
			:: true ->
#endif
				printf("MSC: r%d   forgets p%d (fenced), abandons its records\n", r, p_);
				abandon(r, p_); x_ = x_ | (1 << p_)
			fi
		:: else
		fi
	}
	p_ = 0;
	j_ = 0;
	for (i_ : 0 .. nb-1) {
		if
		:: x_ & (1 << rpart[b[i_]]) -> skip
		:: else -> b[j_] = b[i_]; j_++
		fi
	}
	nb = j_; j_ = 0; i_ = 0; x_ = 0;
#ifdef RETAKE
	if
	:: f_ && nb > 0 ->
		for (i_ : 0 .. nb-1) { rep[r].rb = rep[r].rb | (1 << b[i_]) }
		i_ = 0; nb = 0;
		printf("MSC: r%d   the rest of the batch waits for the re-take (mask %d)\n", r, rep[r].rb)
	:: else
	fi;
#endif
	f_ = 0;
	if :: nb > 0 -> printf("MSC: r%d   claims the rest of the batch again:\n", r) :: else fi
}

/* Router.Run / prepare + claimer.claim, atomic with the ledger */
inline pollclaim(r, k0, k1, first) {
	nb = 0;
	printf("MSC: r%d polls a batch and claims it:\n", r);
	if
	:: first == 0 -> take(r, 0, k0); take(r, 1, k1)
	:: else       -> take(r, 1, k1); take(r, 0, k0)
	fi;
#ifdef KNOWN
	known(r);   /* a read, unfenced: it changes no row */
#endif
#ifndef NO_FENCE
	/* the claim statement's fence (sink/ledger/claim.go): unless the epoch
	 * of every partition of the batch still holds, it writes nothing and
	 * names the stale partitions (FencedError) */
	m_ = 0;
	if :: k0 > 0 && rep[r].ep[0] != lep[0] -> m_ = m_ | 1 :: else fi;
	if :: k1 > 0 && rep[r].ep[1] != lep[1] -> m_ = m_ | 2 :: else fi;
	if
	:: m_ != 0 -> fencedclaim(r)
	:: else
	fi;
	m_ = 0;
#endif
	claim(r);
	nb = 0; i_ = 0; c_ = 0; w_ = 0; f_ = 0;
	for (c_ : 0 .. NREC-1) { b[c_] = 0 }
	c_ = 0
}

#ifdef RETAKE
/* claimer.claim(rest) after committer.fenced returned: the batch that
 * waited for the re-take, less the records of partitions forgotten since
 * (unfenced ends them), claimed again with each partition's fence now
 * (the re-taken one's new epoch); it may be refused again */
inline reclaim(r) {
	nb = 0; m_ = 0;
	printf("MSC: r%d claims the batch that waited for the re-take again, under the new fence:\n", r);
	for (c_ : 0 .. NREC-1) {
		if
		:: (rep[r].rb & (1 << c_)) && rep[r].st[c_] == S_INFL ->
			b[nb] = c_; nb++;
			if :: rep[r].ep[rpart[c_]] != lep[rpart[c_]] -> m_ = m_ | (1 << rpart[c_]) :: else fi
		:: else
		fi
	}
	rep[r].rb = 0;
	if
	:: m_ != 0 -> fencedclaim(r)
	:: else
	fi;
	m_ = 0;
	claim(r);
	nb = 0; i_ = 0; c_ = 0; w_ = 0; f_ = 0;
	for (c_ : 0 .. NREC-1) { b[c_] = 0 }
	c_ = 0
}
#endif

#ifdef TXN
#define AVAIL(r, p, k) (rep[r].pos[p] < plen[p] && avl[pbase[p] + rep[r].pos[p]] >= k)
#else
#define AVAIL(r, p, k) (rep[r].pos[p] + k <= plen[p])
#endif
/* the fence: a partition's records are polled only once the assignment
 * took its epoch (committer.assigned calls Ledger.Own before it tracks
 * the partition) */
#ifndef NO_FENCE
#define TAKEN(r, p) (rep[r].ep[p] != 0)
#else
#define TAKEN(r, p) 1
#endif
/* the zombie fault needs the replica's Own of the partition landed: a
 * replica dropped from the group while its assignment callback's Own is
 * still in flight, whose Own then lands after the new owner's (the
 * holes L' and L'' of README.md, closed by the re-take and the Own's
 * generation); -DZOMBIE_IN_OWN lets the zombie come before the Own */
#if defined(NO_FENCE) || defined(ZOMBIE_IN_OWN)
#define ZTAKEN(r, p) 1
#elif defined(RETAKE)
#define ZTAKEN(r, p) (TAKEN(r, p) && rep[r].rog[p] == 0)
#else
#define ZTAKEN(r, p) TAKEN(r, p)
#endif
/* the assignment's Own is still to land: not once the coordinator
 * confirmed it and its Confirmed Own is in flight (rog of this
 * assignment's generation) */
#if defined(GEN_OWN) && defined(RETAKE)
#define OWNFREE(r, p) (rep[r].rog[p] != rep[r].gen[p])
#else
#define OWNFREE(r, p) 1
#endif
/* the claimer is not waiting in committer.fenced (a new batch is polled
 * and claimed after the one that waits) */
#ifdef RETAKE
#define CLAIMFREE(r) (rep[r].rb == 0)
#else
#define CLAIMFREE(r) 1
#endif
/* no re-take in flight (the run is over only after it) */
#ifdef RETAKE
#define FENCEFREE(r) (rep[r].rb == 0 && rep[r].rog[0] == 0 && rep[r].rog[1] == 0)
#else
#define FENCEFREE(r) 1
#endif
#define CANPOLL(r, k0, k1) \
	(!rep[r].dlpend && CLAIMFREE(r) && \
	 (k0 == 0 || (rep[r].own[0] && TAKEN(r, 0) && AVAIL(r, 0, k0))) && \
	 (k1 == 0 || (rep[r].own[1] && TAKEN(r, 1) && AVAIL(r, 1, k1))))

/* sink/starter (*Temporal).Start of generation g (request ID
 * starter.RequestID(wid, g)); the run it answers with goes to x_.
 * Temporal (handleConflict): a request ID of the current run is answered
 * with that run, open or closed, before the reuse policy is applied. */
#ifdef NO_REQUEST_ID
#define RIDHIT(w, g) 0
#else
#define RIDHIT(w, g) (exec[w] > 0 && xgen[w] == g)
#endif
inline tstart(r, w, g) {
	if
	:: RIDHIT(w, g) ->
		x_ = exec[w];
		printf("MSC: r%d   Temporal: request ID of generation %d is the current run %d's: that run, Started=false\n", r, g, x_)
#ifdef FAILED_ONLY
	:: !RIDHIT(w, g) && (exec[w] == 0 || xlast[w] == X_FAILED) ->
		/* S2g: a run only after none or a failed one (never after a
		 * completed one: the model of Temporal); the first run is
		 * generation 1 (RERUN_FIRST: every generation is one the ledger
		 * handed out); no two runs of one generation (below) */
		assert(exec[w] == 0 || xlast[w] == X_FAILED);
#ifdef RERUN_FIRST
		assert(g >= 1 && g <= lgen[w]);
#else
		assert(g >= 1 && (exec[w] > 0 || g == 1));
#endif
		/* gap 1 (open in Go): a delayed start of an older generation than
		 * the current (failed) run's creates a run; Temporal matches only
		 * the current run's request ID */
#ifndef GAP1_OK
		assert(exec[w] == 0 || g >= xgen[w]);
		assert((xgens[w] & (1 << g)) == 0);
#else
		/* gap 1 let through (it is reported by the search without
		 * GAP1_OK): S2g's distinctness is checked for the other starts */
		assert(exec[w] == 0 || g < xgen[w] || (xgens[w] & (1 << g)) == 0);
		if
		:: exec[w] > 0 && g < xgen[w] ->
			printf("MSC: r%d   GAP 1: a start of generation %d creates a run after generation %d's failed\n", r, g, xgen[w])
		:: else
		fi;
#endif
		exec[w]++; xlast[w] = X_RUNNING; xgen[w] = g; xgens[w] = xgens[w] | (1 << g);
#ifndef RERUN_FIRST
		/* RC's needs older than the new run are met for good: forget them
		 * (no behaviour changes; equal states merge) */
		rep[0].jneed[w] = 0; rep[0].rneed[w] = 0; rep[1].jneed[w] = 0; rep[1].rneed[w] = 0;
#endif
		x_ = exec[w];
		printf("MSC: r%d   Temporal: execution %d created for wid%d, generation %d\n", r, exec[w], w, g)
	:: !RIDHIT(w, g) && !(exec[w] == 0 || xlast[w] == X_FAILED) ->
		x_ = exec[w];
		printf("MSC: r%d   Temporal: already started (run %d)\n", r, x_)
	fi
#else
	:: !RIDHIT(w, g) && exec[w] == 0 ->
		exec[w] = 1; xgen[w] = g; x_ = 1;
		printf("MSC: r%d   Temporal: execution created for wid%d, generation %d\n", r, w, g)
	:: !RIDHIT(w, g) && exec[w] > 0 ->
		x_ = exec[w];
		printf("MSC: r%d   Temporal: already started\n", r)
	fi;
	assert(exec[w] <= 1)   /* S2 */
#endif
}

#ifdef SIGNAL
/* processor.(*startPool).worker (a signal route's job: StartRequest.Signal set) for a
 * signal route's job) -> sink/starter.(*Temporal).Start ->
 * signalWithStart: SignalWithStartWorkflowExecution to the entity
 * workflow, request ID derived from the delivery key. Temporal
 * (service/history/api/signalwithstart): a running current run takes the
 * signal unless its mutable state holds the request ID (IsSignalRequested:
 * a duplicate, answered with success), and records it (AddSignalRequested);
 * with no run or a closed one, a new run is started with the signal
 * (NewWorkflowWithSignal, which records the request ID in the new run). */
#ifdef SIG_NO_REQID
#define SIGRID 0
#else
#define SIGRID erid
#endif
inline tsignal(r) {
	if
	:: eopen && SIGRID ->
		printf("MSC: r%d   Temporal: the open run holds the request ID: duplicate signal, not added (success)\n", r)
	:: eopen && !SIGRID ->
#ifndef SIG_NO_REQID
		erid = 1;
#endif
		epend++; dlv = 1;
		printf("MSC: r%d   Temporal: the open run accepts the signal (%d not handled)\n", r, epend)
	:: !eopen ->
		/* a new run: a fresh mutable state and a fresh seen-set (the
		 * workflow's input carries none) */
		eopen = 1; eseen = 0; epend = 1; dlv = 1;
#ifndef SIG_NO_REQID
		erid = 1;
#endif
		printf("MSC: r%d   Temporal: no open run: a new run of the entity workflow is started with the signal\n", r)
	fi
}
#endif

inline clearjob(r, w) {
	rep[r].jph[w] = J_NONE; rep[r].jown[w] = 0; rep[r].jwait[w] = 0; rep[r].jorph[w] = 0;
	rep[r].jgen[w] = 0; rep[r].jrun[w] = 0; rep[r].jsreq[w] = 0
#ifndef NO_FENCE
	; rep[r].jep[w] = 0
#endif
#if defined(FAILED_ONLY) && !defined(RERUN_FIRST)
	; rep[r].jrck[w] = 0; rep[r].jneed[w] = 0; rep[r].rneed[w] = 0
#endif
}

/* finish the job's (plain) waiters */
inline finishwaiters(r, w) {
	for (i_ : 0 .. NREC-1) {
		if
		:: rep[r].jwait[w] & (1 << i_) -> finish(r, i_)
		:: else
		fi
	}
	i_ = 0
}

/* startPool.done(ok=true): finish the owner (unless its partition is gone)
 * and the waiters; the re-check waiters are submitted again as checks */
inline doneok(r, w) {
#if defined(FAILED_ONLY) && !defined(RERUN_FIRST)
	/* RC: the check copies that finish now (owner, plain waiters) saw at
	 * their claims no failed run as new as the newest run now */
	assert(rep[r].jneed[w] == 0 || exec[w] > rep[r].jneed[w]);
#endif
	if
	:: !rep[r].jorph[w] -> finish(r, rep[r].jown[w])
	:: else
	fi;
	finishwaiters(r, w);
#if defined(FAILED_ONLY) && !defined(RERUN_FIRST)
	m_ = rep[r].jrck[w]; sg_ = rep[r].jgen[w]; sn_ = rep[r].rneed[w];
	clearjob(r, w);
	resubmit(r, w)
#else
	clearjob(r, w)
#endif
}

/* startPool.marker -> ledger MarkStarted, then done(ok): finish owner and
 * waiters. Start first, record after: SET state = 'started', run_id,
 * generation = greatest(generation, g) WHERE state = 'pending' OR
 * (state = 'started' AND generation < g), g the start's generation.
 * RERUN_FIRST: pending rows only. SIGNAL: the same marker and MarkStarted
 * after the delivery (the row marked started: delivered). */
inline markrow(r, w) {
	if
#if defined(RERUN_FIRST)
	:: lst[w] == L_PENDING -> lst[w] = L_STARTED; lrun[w] = rep[r].jrun[w]
#elif defined(MUT_MARK_PENDING_ONLY)
	:: lst[w] == L_PENDING -> lst[w] = L_STARTED;
		if :: lgen[w] < rep[r].jgen[w] -> lgen[w] = rep[r].jgen[w] :: else fi
#elif defined(MUT_MARK_NO_GUARD)
	:: lst[w] != L_NONE -> lst[w] = L_STARTED; lgen[w] = rep[r].jgen[w]
#else
	:: lst[w] == L_PENDING || (lst[w] == L_STARTED && lgen[w] < rep[r].jgen[w]) ->
		lst[w] = L_STARTED;
		if :: lgen[w] < rep[r].jgen[w] -> lgen[w] = rep[r].jgen[w] :: else fi
#endif
	:: else
	fi;
#ifdef SIGNAL
	printf("MSC: r%d mark wid%d started (delivered): row %d; finish rec%d (orphaned=%d: not finished if 1) and waiters mask %d\n", r, w,
		lst[w], rep[r].jown[w], rep[r].jorph[w], rep[r].jwait[w]);
#else
	printf("MSC: r%d mark wid%d started (run %d, generation %d): row %d generation %d; finish rec%d (orphaned=%d: not finished if 1) and waiters mask %d\n", r, w,
		rep[r].jrun[w], rep[r].jgen[w], lst[w], lgen[w], rep[r].jown[w], rep[r].jorph[w], rep[r].jwait[w]);
#endif
	doneok(r, w)
}

/* startPool.release(ok=false): the first waiter still owned takes over;
 * the re-check waiters are submitted again as checks (to the job taken
 * over, or the first owns a new check job) */
inline takeover(r, w) {
#if defined(FAILED_ONLY) && !defined(RERUN_FIRST)
	m_ = rep[r].jrck[w]; sg_ = rep[r].jgen[w]; sn_ = rep[r].rneed[w];
	rep[r].jrck[w] = 0; rep[r].rneed[w] = 0;
#endif
	if
	:: rep[r].jwait[w] == 0 ->
		printf("MSC: r%d job of rec%d abandoned, no waiter\n", r, rep[r].jown[w]);
		clearjob(r, w)
	:: else ->
		i_ = 0;
		do
		:: rep[r].jwait[w] & (1 << i_) -> break
		:: else -> i_++
		od;
		/* the new job is {rec: w, req: j.req, check: j.check, startReq:
		 * j.startReq}: a check stays a check (it asks LastRun again), a
		 * start starts j.req's generation */
		if
#ifndef PRE_GAP2_FIX
		:: rep[r].jph[w] == J_CHECK || rep[r].jph[w] == J_LR || rep[r].jph[w] == J_RERUN ->
			rep[r].jph[w] = J_CHECK;
			printf("MSC: r%d job of rec%d abandoned; waiter rec%d takes it over as a check (startReq generation %d)\n", r, rep[r].jown[w], i_, rep[r].jsreq[w])
#endif
		:: else ->
			rep[r].jph[w] = J_START;
			printf("MSC: r%d job of rec%d abandoned; waiter rec%d takes it over as a start of generation %d\n", r, rep[r].jown[w], i_, rep[r].jgen[w])
		fi;
		rep[r].jrun[w] = 0;
		rep[r].jown[w] = i_; JEP(r, w, i_);
		rep[r].jwait[w] = rep[r].jwait[w] & ~(1 << i_);
		rep[r].jorph[w] = 0;
		i_ = 0
	fi
#if defined(FAILED_ONLY) && !defined(RERUN_FIRST)
	; resubmit(r, w)
#endif
}

#ifndef NO_FENCE
/* a mark refused by the fence (the job's owner record's partition p moved:
 * its epoch is no longer the job's): the row is not changed;
 * committer.fenced: if this assignment is the refused one and the group
 * coordinator still assigns p to r, r takes p again (its Own in flight,
 * a step of its own) and the marker sends the mark again under the new
 * fence once it landed (the job stays; MARKOK); else r forgets p if this
 * assignment is the refused one, and the job is done(ok=false): the owner
 * is abandoned, a waiter of a partition still owned takes the job over
 * (under its own fence). (A mark of a partition whose re-take is in
 * flight waits for it, MARKOK: in Go it is refused, waits on fenceMu and
 * is sent again under the new fence.) */
inline fencedmark(r, w, p) {
	printf("MSC: r%d   ledger fence: the mark of wid%d for rec%d is refused (p%d's epoch %d, the job's %d): row %d unchanged\n", r, w,
		rep[r].jown[w], p, lep[p], rep[r].jep[w], lst[w]);
	if
#ifdef RETAKE
	:: rep[r].own[p] && rep[r].ep[p] == rep[r].jep[w] && MINE(r, p) ->
		printf("MSC: r%d   the coordinator still assigns p%d to r%d: takes it again (its Own in flight); the mark waits\n", r, p, r);
		rep[r].rog[p] = rep[r].gen[p]
	:: rep[r].own[p] && rep[r].ep[p] == rep[r].jep[w] && !MINE(r, p) ->
#else
	:: rep[r].own[p] && rep[r].ep[p] == rep[r].jep[w] ->
#endif
		printf("MSC: r%d   forgets p%d (fenced), abandons its records\n", r, p);
		abandon(r, p); takeover(r, w)
	:: else -> takeover(r, w)
	fi
}
#endif

#ifdef RETAKE
/* the re-take's Own of p lands (Ledger.Own in committer.fenced) */
inline retake(r, p) {
	lep[p]++;
#ifdef GEN_OWN
	lgo[p] = rep[r].rog[p];   /* Confirmed: whatever the row held */
#endif
	if
	:: rep[r].own[p] && rep[r].gen[p] == rep[r].rog[p] ->
		rep[r].ep[p] = lep[p];
		for (w_ : 0 .. NWID-1) {
			if
			:: rep[r].jph[w_] != J_NONE && !rep[r].jorph[w_] && rpart[rep[r].jown[w_]] == p -> rep[r].jep[w_] = lep[p]
			:: else
			fi
		}
		w_ = 0;
		printf("MSC: r%d takes p%d again in the ledger's fence: epoch %d\n", r, p, lep[p])
	:: else ->
		printf("MSC: r%d's re-take Own of p%d lands (epoch %d); the partition is gone meanwhile: not kept\n", r, p, lep[p])
	fi;
	rep[r].rog[p] = 0
}
#endif

#ifndef NO_FENCE
/* the assignment callback's Own of p lands (committer.assigned ->
 * Ledger.Own, Ownership.Generation = the generation r was assigned p
 * in). GEN_OWN: the row takes it only if its generation is not later
 * (ownSQL's WHERE o.generation <= EXCLUDED.generation), else the Own
 * returns 0 for p and committer.confirm asks the coordinator: if it
 * still assigns p to r, r Owns again Confirmed (in flight, rog: a step
 * of its own, retake), else p is not taken (forgotten). The refusal and
 * the coordinator's answer are one step, as in fencedclaim (the refusal
 * writes nothing and reads only the ledger, the answer only the group).
 * In the model the confirmed branch is never taken: generations never
 * start again (no group made anew), so a row of a later generation means
 * the coordinator moved p away. */
inline ownlands(r, p) {
#ifdef GEN_OWN
	if
	:: lgo[p] <= rep[r].gen[p] ->
		lep[p]++; lgo[p] = rep[r].gen[p]; rep[r].ep[p] = lep[p];
		printf("MSC: r%d takes p%d in the ledger's fence: epoch %d, generation %d\n", r, p, lep[p], lgo[p])
	:: else ->
		printf("MSC: r%d's Own of p%d (generation %d) takes nothing: the owner row holds generation %d\n", r, p, rep[r].gen[p], lgo[p]);
		if
#ifdef RETAKE
		:: MINE(r, p) ->
			printf("MSC: r%d   the coordinator still assigns p%d to r%d: Owns it again, Confirmed (in flight)\n", r, p, r);
			rep[r].rog[p] = rep[r].gen[p]
		:: else ->
#else
		:: true ->
#endif
			printf("MSC: r%d   the coordinator does not assign p%d to r%d: not taken (forgotten)\n", r, p, r);
			abandon(r, p)
		fi
	fi
#else
	lep[p]++; rep[r].ep[p] = lep[p];
	printf("MSC: r%d takes p%d in the ledger's fence: epoch %d\n", r, p, lep[p])
#endif
}
#endif

/* MarkStarted with the job's fence (Started.Fence); the marker's
 * done(ok=false) for a refused row */
inline mark(r, w) {
#ifndef NO_FENCE
	p_ = rpart[rep[r].jown[w]];
	if
	:: rep[r].jep[w] != lep[p_] -> fencedmark(r, w, p_)
	:: else -> markrow(r, w)
	fi;
	p_ = 0
#else
	markrow(r, w)
#endif
}

#ifdef FAILED_ONLY
/* startPool.startInstead: a check that runs nothing again starts the
 * recorded startReq if a NEW/REDRIVE copy waits on it, else done(ok) */
inline startinstead(r, w) {
	if
#ifndef PRE_GAP2_FIX
	:: rep[r].jsreq[w] != 0 ->
		rep[r].jph[w] = J_START; rep[r].jgen[w] = rep[r].jsreq[w]; rep[r].jsreq[w] = 0; rep[r].jrun[w] = 0;
		printf("MSC: r%d   a waiter needs a start: start generation %d instead\n", r, rep[r].jgen[w])
#endif
	:: else ->
		doneok(r, w)
	fi
}

#ifdef RERUN_FIRST
/* ledger (*Postgres).Rerun(wid, run): compare-and-set state = started AND
 * run_id = run -> pending, generation + 1, run_id NULL */
inline reruncas(r, w, rn) {
	if
	:: lst[w] == L_STARTED && lrun[w] == rn ->
		lst[w] = L_PENDING; lgen[w]++; lrun[w] = 0;
		printf("MSC: r%d   ledger Rerun(run %d): row pending, generation %d\n", r, rn, lgen[w])
	:: else ->
		printf("MSC: r%d   ledger Rerun(run %d): no change (row state %d, run %d, generation %d)\n", r, rn, lst[w], lrun[w], lgen[w])
	fi
}

/* startPool.rerun after LastRun said run jrun failed: Rerun, then start the
 * row's generation if the row is pending, else done(ok): a duplicate */
inline rerun(r, w) {
	reruncas(r, w, rep[r].jrun[w]);
	if
	:: lst[w] == L_PENDING ->
		/* j.check = false: startReq is no longer read (Go keeps it; the
		 * model clears it, which changes no step) */
		rep[r].jph[w] = J_START; rep[r].jgen[w] = lgen[w]; rep[r].jrun[w] = 0; rep[r].jsreq[w] = 0;
		printf("MSC: r%d   row pending: start generation %d\n", r, lgen[w])
	:: else ->
		printf("MSC: r%d   row not pending: duplicate\n", r);
		startinstead(r, w)
	fi
}
#else
/* startPool.rerun after LastRun said the current run L (number rn,
 * generation gl) failed: no ledger step; the job becomes the start of
 * generation next = max(g_row, g_L) + 1, g_row being the check's
 * req.Generation (the claim's); jrun keeps L for R */
inline rerunnext(r, w, rn, gl) {
#if defined(MUT_NEXT_FROM_ROW)
	x_ = rep[r].jgen[w] + 1;
	printf("MSC: r%d   re-run: start generation %d = row %d + 1 (MUTATION; run %d's is %d)\n", r, x_, rep[r].jgen[w], rn, gl);
#elif defined(MUT_NEXT_FROM_RUN)
	x_ = gl + 1;
	printf("MSC: r%d   re-run: start generation %d = run %d's %d + 1 (MUTATION; row %d)\n", r, x_, rn, gl, rep[r].jgen[w]);
#else
	if
	:: rep[r].jgen[w] >= gl -> x_ = rep[r].jgen[w] + 1
	:: else -> x_ = gl + 1
	fi;
	printf("MSC: r%d   re-run: start generation %d = max(row %d, run %d's %d) + 1\n", r, x_, rep[r].jgen[w], rn, gl);
#endif
	rep[r].jph[w] = J_START; rep[r].jgen[w] = x_; rep[r].jrun[w] = rn; rep[r].jsreq[w] = 0;
	x_ = 0
}
#endif
#endif

#ifdef PERM
/* startPool.deadLetter, first step: deadLetterWriter.write of the owner
 * (reason temporal_permanent): the dead-letter log says whether it was
 * written before (a redelivery), else it is produced and logged.
 * -DOLD_DL_FINISH: the writer ends the owner's record here (finished,
 * committable) */
inline dlwrite(r, w) {
	c_ = rep[r].jown[w];
	if
	:: dlw[c_] ->
		printf("MSC: r%d dead-letter rec%d (temporal_permanent): the dead-letter log says already written\n", r, c_)
	:: else ->
		dlw[c_] = 1;
		printf("MSC: r%d dead-letter rec%d (temporal_permanent): written and logged\n", r, c_)
	fi;
#ifdef OLD_DL_FINISH
	if
	:: !rep[r].jorph[w] -> finish(r, c_);
		printf("MSC: r%d   rec%d finished by the writer (OLD RULE)\n", r, c_)
	:: else
	fi;
#endif
	c_ = 0;
	rep[r].jph[w] = J_MDL
}

/* startPool.deadLetter, second step: Ledger.MarkDeadLettered (pending ->
 * dead_lettered), then the owner and the waiters finish (done(ok));
 * -DOLD_DL_FINISH: the waiters only (the owner finished at the write) */
inline markdlrow(r, w) {
	if
	:: lst[w] == L_PENDING -> lst[w] = L_DEAD; rcl[w] = 0
	:: else
	fi;
	printf("MSC: r%d MarkDeadLettered wid%d: row %d; finish rec%d (orphaned=%d: not finished if 1) and waiters mask %d\n", r, w,
		lst[w], rep[r].jown[w], rep[r].jorph[w], rep[r].jwait[w]);
#ifdef OLD_DL_FINISH
	finishwaiters(r, w);
	clearjob(r, w)
#else
	doneok(r, w)
#endif
}

/* MarkDeadLettered with the job's fence (DeadLettered.Fence); refused:
 * deadLetter's done(j, false) */
inline markdl(r, w) {
#ifndef NO_FENCE
	p_ = rpart[rep[r].jown[w]];
	if
	:: rep[r].jep[w] != lep[p_] -> fencedmark(r, w, p_)
	:: else -> markdlrow(r, w)
	fi;
	p_ = 0
#else
	markdlrow(r, w)
#endif
}
#endif

/* committer.revoked / lost: forget the partition, abandon its in-flight records */
inline abandon(r, p) {
	for (o_ : 0 .. plen[p]-1) {
		c_ = pbase[p] + o_;
		rep[r].st[c_] = S_NONE;
		for (w_ : 0 .. NWID-1) {
			rep[r].jwait[w_] = rep[r].jwait[w_] & ~(1 << c_);
#if defined(FAILED_ONLY) && !defined(RERUN_FIRST)
			rep[r].jrck[w_] = rep[r].jrck[w_] & ~(1 << c_);
#endif
			if
			:: rep[r].jph[w_] != J_NONE && rep[r].jown[w_] == c_ && rep[r].jorph[w_] == 0 -> rep[r].jorph[w_] = 1
			:: else
			fi
		}
	}
	rep[r].own[p] = 0; rep[r].gen[p] = 0; rep[r].pos[p] = 0; rep[r].cmt[p] = 0; rep[r].tlo[p] = 0;
#ifndef NO_FENCE
	rep[r].ep[p] = 0;
#endif
#ifndef OLD_COMMIT
	/* the ticker's commit in progress leaves the partition out: its send
	 * carries only partitions still owned (this assignment) */
	if
	:: rep[r].tph != 0 && rep[r].tpart == p ->
		printf("MSC: r%d   the ticker's commit in progress leaves p%d out (no longer owned)\n", r, p);
		rep[r].tph = 0; rep[r].tpart = 0; rep[r].toff = 0
	:: else
	fi;
#endif
	o_ = 0; c_ = 0; w_ = 0
}

/* group coordinator assigns p to q in a new generation */
inline assign(q, p) {
	if
	:: rep[q].own[p] -> abandon(q, p)   /* q had a stale view: onLost first */
	:: else
	fi;
	bgen[p]++;
	rep[q].own[p] = 1; rep[q].gen[p] = bgen[p]; rep[q].pos[p] = committed[p]; rep[q].cmt[p] = committed[p]; rep[q].tlo[p] = 0;
#ifndef NO_FENCE
	rep[q].ep[p] = 0;   /* its Own is a step of its own, below */
#endif
	printf("MSC: partition p%d assigned to r%d, generation %d, from offset %d\n", p, q, bgen[p], committed[p])
}

/* something to commit: the tracker's finished prefix (from cmt, past a
 * record the poll skipped) reaches past cmt. TXN: at most one skipped
 * record in a row. */
#define STAT(r, p, o) rep[r].st[pbase[p] + o]
#define FINAT(r, p) (rep[r].cmt[p] < plen[p] && \
	(STAT(r, p, rep[r].cmt[p]) == S_FIN || \
	 (SKIPPED(pbase[p] + rep[r].cmt[p]) && rep[r].cmt[p] + 1 < plen[p] && STAT(r, p, rep[r].cmt[p] + 1) == S_FIN)))

/* tracker.next: one past the last record of the contiguous finished prefix
 * that starts at cmt (records the poll skipped are not in it) -> k_ */
inline prefixend(r, p) {
	k_ = rep[r].cmt[p]; o_ = rep[r].cmt[p];
	do
	:: o_ < plen[p] && STAT(r, p, o_) == S_FIN -> o_++; k_ = o_
	:: o_ < plen[p] && STAT(r, p, o_) != S_FIN && SKIPPED(pbase[p] + o_) -> o_++
	:: else -> break
	od;
	o_ = 0
}

#ifdef PERM
/* the event of wid w was dead-lettered as temporal_permanent (a copy with
 * the row's payload written: one event, dead-lettered once) -> f_ */
inline evdl(w) {
	f_ = 0;
	for (j_ : 0 .. NREC-1) {
		if
		:: rwid[j_] == w && dlw[j_] && !cfl[j_] -> f_ = 1
		:: else
		fi
	}
	j_ = 0
}
#endif

/* the broker accepts r's OffsetCommit of p at off (the member's generation
 * is current): M, then S1, S3 over every offset below, D over the newly
 * committed ones; the committer records its commit */
inline accept(r, p, off) {
	printf("MSC: r%d commits p%d at offset %d (group's committed offset was %d)\n", r, p, off, committed[p]);
	assert(off >= committed[p]);   /* M: a committed offset never goes backwards */
	for (o_ : 0 .. off-1) {
		c_ = pbase[p] + o_;
		if
		:: NOTEV(c_)
		:: else ->
#ifndef LOSS_ONLY
#ifdef PERM
			evdl(rwid[c_]);
			assert(dlw[c_] || exec[rwid[c_]] > 0 || f_);   /* S1 */
			f_ = 0;
#elif defined(RUNLIMIT)
			/* SD under RUNLIMIT: a run's limit heals, so it refuses the
			 * event for no good: a dead letter does not account for it
			 * (WA has no conflicting copy, nothing is refused for good) */
			assert(dlv);   /* SD (S1): the event was delivered */
#elif defined(SIGNAL)
			assert(dlw[c_] || dlv);   /* SD (S1): the event was delivered */
#else
			assert(dlw[c_] || exec[rwid[c_]] > 0);   /* S1 */
#endif
#endif
			assert(fin[c_]);                         /* S3 */
#ifdef KNOWN
			/* C: a copy with another payload than its row's is
			 * dead-lettered before it is committed */
			assert(dlw[c_] || rhash[c_] == lhash[rwid[c_]])
#else
			skip
#endif
		fi
	}
#if !defined(LOSS_ONLY) && !defined(D_OFF) && !defined(RERUN_FIRST)
	/* D: a newly committed record (not a conflict copy) has its row
	 * started or dead_lettered (PERM: or re-claimed since it was last
	 * dead_lettered, by a copy that now owns it) */
	for (o_ : committed[p] .. off-1) {
		c_ = pbase[p] + o_;
		if
		:: NOTEV(c_) || cfl[c_]
		:: else ->
#if defined(PERM) || defined(RUNLIMIT_PERM)
			assert(lst[rwid[c_]] == L_STARTED || lst[rwid[c_]] == L_DEAD || rcl[rwid[c_]])   /* D */
#else
			assert(lst[rwid[c_]] == L_STARTED)   /* D */
#endif
		fi
	}
#endif
	o_ = 0; c_ = 0;
	committed[p] = off;
	if
	:: rep[r].own[p] && rep[r].gen[p] == bgen[p] && off > rep[r].cmt[p] ->
		/* committed: the tracker forgets the prefix */
		for (o_ : rep[r].cmt[p] .. off-1) { STAT(r, p, o_) = S_NONE }
		o_ = 0;
		rep[r].cmt[p] = off
	:: else
	fi
}

/* a member of the group in good standing: not fenced (the model's zombie,
 * whose generation of a partition it still believes it owns is stale) */
#define MEMBER(r) (rep[r].alive && \
	!(rep[r].own[0] && rep[r].gen[0] != bgen[0]) && !(rep[r].own[1] && rep[r].gen[1] != bgen[1]))

/* the broker's answer to r's OffsetCommit of p at off, sent with the
 * member's current generation: the broker checks the generation, not who
 * owns p. A stale owner (a zombie) is rejected and learns the partition
 * was lost (franz-go rejoins and calls onLost). */
inline broker(r, p, off) {
	if
	:: rep[r].own[p] && rep[r].gen[p] == bgen[p] -> accept(r, p, off)
	:: rep[r].own[p] && rep[r].gen[p] != bgen[p] ->
		printf("MSC: r%d commit of p%d at %d REJECTED (generation %d < %d): lost\n", r, p, off, rep[r].gen[p], bgen[p]);
		abandon(r, p)
	:: !rep[r].own[p] && MEMBER(r) ->
		printf("MSC: r%d sends p%d at %d, a partition it no longer owns; its generation is current\n", r, p, off);
		accept(r, p, off)
	:: !rep[r].own[p] && !MEMBER(r) ->
		printf("MSC: r%d commit of p%d at %d REJECTED (fenced)\n", r, p, off)
	fi
}

/* committer.commit (c): the send. The fixed rule leaves out a partition
 * no longer owned (abandon already dropped it from the ticker's commit)
 * and an offset not above our last commit. */
inline send(r, p, off) {
#ifndef OLD_COMMIT
	if
	:: !rep[r].own[p] || off <= rep[r].cmt[p] ->
		printf("MSC: r%d   the send leaves p%d out (offset %d, last committed %d)\n", r, p, off, rep[r].cmt[p])
	:: else -> broker(r, p, off)
	fi
#else
	broker(r, p, off)
#endif
}

/* committer.commit (b): the group's committed offsets; a partition the
 * group committed past our offset is left out (never backwards). (Its
 * second condition, "and moved since we were assigned it", always holds
 * here: our offset is past the assignment's.) -> f_ = 1 to go on */
inline groupcheck(r, p, off) {
	if
	:: committed[p] > off ->
		printf("MSC: r%d   group's committed offset of p%d is %d, past our %d: left out\n", r, p, committed[p], off);
		rep[r].tlo[p] = 1;
		f_ = 0
	:: else -> f_ = 1
	fi
}

/* a commit of p, (a) to (c) in one step: committer.revoked's (rv = 1; the
 * fixed rule holds the commit lock across them, and the partition stays
 * ours until the revoke forgets it; the wait for records in flight is the
 * interleaving before this step), or, with -DATOMIC_COMMIT, the ticker's
 * (rv = 0) */
inline commitnow(r, p, rv) {
	if
	:: FINAT(r, p) ->
		prefixend(r, p);
		if
		:: rv -> printf("MSC: r%d   the revoke commits p%d: finished prefix to %d\n", r, p, k_)
		:: else -> printf("MSC: r%d ticker commit (a-c in one step): p%d's finished prefix ends at %d\n", r, p, k_)
		fi;
		x_ = k_; k_ = 0;
		groupcheck(r, p, x_);
		if
		:: f_ -> send(r, p, x_)
		:: else
		fi;
		f_ = 0; x_ = 0
	:: else
	fi
}

/* the commit lock: the revoke's commit waits for the ticker's (fixed) */
#ifndef OLD_COMMIT
#define LOCKFREE(r) (rep[r].tph == 0)
#else
#define LOCKFREE(r) 1
#endif

/* a job's Temporal / ledger call (wid 0): possible unless the job is
 * orphaned and its one call in flight has already landed (health.retry
 * calls fn(ctx) with the cancelled context, which fails at once) */
#define MAYCALL(r) (rep[r].jorph[0] < 2)
#define LANDED(r)  if :: rep[r].jorph[0] == 1 -> rep[r].jorph[0] = 2 :: else fi
/* the marker is not waiting in committer.fenced for a re-take of the job's
 * partition (an orphaned job's partition is no longer this assignment) */
#ifdef RETAKE
#define MARKOK(r, w) (rep[r].jorph[w] != 0 || rep[r].rog[rpart[rep[r].jown[w]]] == 0)
#else
#define MARKOK(r, w) 1
#endif

#ifdef REPLAY
#define REPLAYDONE rdone
#else
#define REPLAYDONE 1
#endif
/* the run is over: every partition committed to its end */
#define ALLDONE (committed[0] == plen[0] && committed[1] == plen[1])

inline finalcheck(q) {
	for (c_ : 0 .. NREC-1) {
		if
		:: NOTEV(c_)
		:: else ->
#ifdef PERM
			evdl(rwid[c_]);
			assert(!(dlw[c_] == 0 && exec[rwid[c_]] == 0 && !f_));  /* S1 at the end: no lost event */
			f_ = 0
#elif defined(RUNLIMIT)
			assert(dlv)  /* SD at the end: no event left undelivered (nothing refused for good) */
#elif defined(SIGNAL)
			assert(!(dlw[c_] == 0 && !dlv))  /* SD at the end: no event left undelivered */
#else
			assert(!(dlw[c_] == 0 && exec[rwid[c_]] == 0))  /* S1 at the end: no lost event */
#endif
		fi
	}
#if !defined(LOSS_ONLY) && !defined(E2_OFF)
	/* E2 once no replica has a job left: the other replica (a zombie)
	 * may still start and mark; the last replica to end checks it */
	for (w_ : 0 .. NWID-1) {
		assert(rep[q].jph[w_] != J_NONE || lst[w_] != L_PENDING)   /* E2: no claim left pending */
	}
#endif
	c_ = 0; w_ = 0
}

/* ================= a replica ================= */

proctype replica(byte r) {
	byte q = 1 - r;

	do
	/* ---- poll + claim: any prefix of each owned partition, either order ---- */
	:: d_step { CANPOLL(r, 1, 0) -> pollclaim(r, 1, 0, 0) }
	:: d_step { CANPOLL(r, 2, 0) -> pollclaim(r, 2, 0, 0) }
	:: d_step { CANPOLL(r, 0, 1) -> pollclaim(r, 0, 1, 0) }
	:: d_step { CANPOLL(r, 0, 2) -> pollclaim(r, 0, 2, 0) }
	:: d_step { CANPOLL(r, 1, 1) -> pollclaim(r, 1, 1, 0) }
	:: d_step { CANPOLL(r, 1, 1) -> pollclaim(r, 1, 1, 1) }
	:: d_step { CANPOLL(r, 1, 2) -> pollclaim(r, 1, 2, 0) }
	:: d_step { CANPOLL(r, 1, 2) -> pollclaim(r, 1, 2, 1) }
	:: d_step { CANPOLL(r, 2, 1) -> pollclaim(r, 2, 1, 0) }
	:: d_step { CANPOLL(r, 2, 1) -> pollclaim(r, 2, 1, 1) }
	:: d_step { CANPOLL(r, 2, 2) -> pollclaim(r, 2, 2, 0) }
	:: d_step { CANPOLL(r, 2, 2) -> pollclaim(r, 2, 2, 1) }

	/* ---- dead-letter the claim's conflicts, then finish them ---- */
	:: d_step { rep[r].dlpend ->
		for (c_ : 0 .. NREC-1) {
			if
			:: rep[r].st[c_] == S_DLQ -> dlw[c_] = 1; finish(r, c_);
				printf("MSC: r%d dead-letters rec%d (conflict), finished\n", r, c_)
			:: else
			fi
		}
		c_ = 0; rep[r].dlpend = 0 }

	/* ---- start (Temporal), wid 0 ---- */
#ifdef SIGNAL
	/* ---- deliver: processor.(*startPool).worker ->
	 * sink/starter.(*Temporal).Start -> signalWithStart, the job's
	 * call in the worker, retried by (*health).retry; a timeout after it
	 * landed leaves the job to retry it ---- */
	:: d_step { rep[r].jph[0] == J_START && MAYCALL(r) && !FULL -> LANDED(r);
		printf("MSC: r%d deliver rec%d's event: SignalWithStart (request ID of the delivery key)\n", r, rep[r].jown[0]);
		tsignal(r);
		rep[r].jph[0] = J_MARK }
	:: d_step { rep[r].jph[0] == J_START && MAYCALL(r) && !FULL && ntmo > 0 -> LANDED(r);
		printf("MSC: r%d deliver rec%d's event: SignalWithStart TIMEOUT (outcome unknown), will retry\n", r, rep[r].jown[0]);
		ntmo--; tsignal(r) }
#ifdef RUNLIMIT
	/* the run is at its signal limit: Temporal refuses the delivery
	 * (InvalidArgument, before the request ID), nothing is added */
#ifndef RUNLIMIT_PERM
	/* transient (RunLimit, the runGate's wait, RunLimitError retried by
	 * (*health).retry): the job stays in its start phase */
	:: d_step { rep[r].jph[0] == J_START && MAYCALL(r) && FULL -> LANDED(r);
		printf("MSC: r%d deliver rec%d's event: REFUSED, the run is at its signal limit: the job waits and retries\n", r, rep[r].jown[0]) }
#else
	/* the old rule: permanent, dead letter and MarkDeadLettered */
	:: d_step { rep[r].jph[0] == J_START && MAYCALL(r) && FULL -> LANDED(r);
		printf("MSC: r%d deliver rec%d's event: REFUSED at the signal limit, PERMANENT (OLD RULE): dead-lettered, row dead_lettered\n", r, rep[r].jown[0]);
		dlw[rep[r].jown[0]] = 1;
		if :: lst[0] == L_PENDING -> lst[0] = L_DEAD; rcl[0] = 0 :: else fi;
		doneok(r, 0) }
#endif
#endif
#elif !defined(PERM)
	:: d_step { rep[r].jph[0] == J_START && MAYCALL(r) -> LANDED(r);
		printf("MSC: r%d start wid0 generation %d for rec%d\n", r, rep[r].jgen[0], rep[r].jown[0]);
		tstart(r, 0, rep[r].jgen[0]);
		/* R: a re-run decided on the failed run L is answered with a run
		 * newer than L (never with L itself) */
		assert(rep[r].jrun[0] == 0 || x_ > rep[r].jrun[0]);
		rep[r].jph[0] = J_MARK; rep[r].jrun[0] = x_; x_ = 0 }
	:: d_step { rep[r].jph[0] == J_START && MAYCALL(r) && ntmo > 0 -> LANDED(r);
		printf("MSC: r%d start wid0 generation %d for rec%d: TIMEOUT (outcome unknown), will retry\n", r, rep[r].jgen[0], rep[r].jown[0]);
		ntmo--; tstart(r, 0, rep[r].jgen[0]); x_ = 0 }
#else
	/* ---- start refused for good; dead-letter write; MarkDeadLettered ---- */
#ifdef REPLAY
	/* the cause fixed: Temporal starts it */
	:: d_step { rep[r].jph[0] == J_START && MAYCALL(r) && fixed -> LANDED(r);
		printf("MSC: r%d start wid0 generation %d for rec%d (the cause fixed)\n", r, rep[r].jgen[0], rep[r].jown[0]);
		tstart(r, 0, rep[r].jgen[0]);
		rep[r].jph[0] = J_MARK; rep[r].jrun[0] = x_; x_ = 0 }
#define REFUSES !fixed
#else
#define REFUSES 1
#endif
	:: d_step { rep[r].jph[0] == J_START && MAYCALL(r) && REFUSES -> LANDED(r);
		printf("MSC: r%d start wid0 generation %d for rec%d: Temporal refuses it for good (permanent)\n", r, rep[r].jgen[0], rep[r].jown[0]);
		rep[r].jph[0] = J_DLW }
	:: d_step { rep[r].jph[0] == J_DLW && MAYCALL(r) -> LANDED(r); dlwrite(r, 0) }
	:: d_step { rep[r].jph[0] == J_MDL && MAYCALL(r) && MARKOK(r, 0) -> LANDED(r); markdl(r, 0) }
#ifdef OLD_DL_FINISH
	/* the old best-effort mark: abandoned when the partition goes away;
	 * release(j, ok=true) finishes the waiters, the row stays pending */
	:: d_step { rep[r].jph[0] == J_MDL && rep[r].jorph[0] ->
		printf("MSC: r%d MarkDeadLettered for rec%d abandoned (partition gone); the waiters finish (OLD RULE), the row stays %d\n", r, rep[r].jown[0], lst[0]);
		finishwaiters(r, 0); clearjob(r, 0) }
#endif
#endif
#ifdef FAILED_ONLY
	/* ---- check job: LastRun; if it failed, start the next generation ---- */
	/* LastRun, a read: with the context cancelled it only errs (then the
	 * job is abandoned, below), so an orphaned check makes no decision */
#ifndef RERUN_FIRST
	/* the LastRun call begins: from here on, a check copy that comes is a
	 * re-check waiter (the read may already have happened) */
	:: d_step { rep[r].jph[0] == J_CHECK && !rep[r].jorph[0] ->
		printf("MSC: r%d check wid0 for rec%d: LastRun call begins\n", r, rep[r].jown[0]);
		rep[r].jph[0] = J_LR }
	:: d_step { rep[r].jph[0] == J_LR && !rep[r].jorph[0] ->
		assert(exec[0] > 0);   /* a started row has a run */
		if
		:: xlast[0] == X_FAILED ->
			printf("MSC: r%d check wid0 for rec%d: LastRun: run %d (generation %d) FAILED\n", r, rep[r].jown[0], exec[0], xgen[0]);
			rerunnext(r, 0, exec[0], xgen[0])
		:: else ->
			printf("MSC: r%d check wid0 for rec%d: LastRun: run %d (generation %d) not failed: duplicate\n", r, rep[r].jown[0], exec[0], xgen[0]);
			startinstead(r, 0)
		fi }
#else
	:: d_step { rep[r].jph[0] == J_CHECK && !rep[r].jorph[0] ->
		if
		:: xlast[0] == X_FAILED ->
			rep[r].jph[0] = J_RERUN; rep[r].jrun[0] = exec[0];
			printf("MSC: r%d check wid0 for rec%d: LastRun: run %d FAILED\n", r, rep[r].jown[0], exec[0])
		:: else ->
			printf("MSC: r%d check wid0 for rec%d: LastRun: run %d not failed: duplicate\n", r, rep[r].jown[0], exec[0]);
			startinstead(r, 0)
		fi }
	:: d_step { rep[r].jph[0] == J_RERUN && !rep[r].jorph[0] ->
		printf("MSC: r%d rerun wid0 for rec%d:\n", r, rep[r].jown[0]);
		rerun(r, 0) }
	/* an orphaned Rerun (in flight when the context was cancelled) lands,
	 * but its answer is lost: done(ok=false), a waiter takes the check
	 * over (release keeps check and startReq) */
#ifndef NO_ORPHAN_RERUN
	:: d_step { rep[r].jph[0] == J_RERUN && rep[r].jorph[0] == 1 ->
		printf("MSC: r%d rerun wid0 for rec%d lands, answer lost (revoked):\n", r, rep[r].jown[0]);
		reruncas(r, 0, rep[r].jrun[0]); takeover(r, 0) }
#endif
#endif /* RERUN_FIRST */
#endif
	/* ---- abandoned job (its record's partition is gone) ---- */
	:: d_step { (rep[r].jph[0] == J_START || rep[r].jph[0] == J_CHECK || rep[r].jph[0] == J_RERUN || rep[r].jph[0] == J_LR
#ifdef PERM
		|| rep[r].jph[0] == J_DLW
#ifndef OLD_DL_FINISH
		|| rep[r].jph[0] == J_MDL
#endif
#endif
		) && rep[r].jorph[0] -> takeover(r, 0) }
	/* ---- mark ---- */
	:: d_step { rep[r].jph[0] == J_MARK && MARKOK(r, 0) -> mark(r, 0) }

	/* ---- the ticker's commit (committer.run -> commit), one partition:
	 * (a) the finished prefix, (b) the group's committed offsets, (c) the
	 * send; the fixed rule holds the commit lock from (a) to (c) ---- */
#ifdef ATOMIC_COMMIT
	:: d_step { rep[r].own[0] && !rep[r].tlo[0] && FINAT(r, 0) ->
		commitnow(r, 0, 0) }
	:: d_step { rep[r].own[1] && !rep[r].tlo[1] && FINAT(r, 1) ->
		commitnow(r, 1, 0) }
#else
	:: d_step { rep[r].tph == 0 && rep[r].own[0] && !rep[r].tlo[0] && FINAT(r, 0) ->
		prefixend(r, 0); rep[r].tph = 1; rep[r].tpart = 0; rep[r].toff = k_; k_ = 0;
		printf("MSC: r%d ticker commit (a): p0's finished prefix ends at %d\n", r, rep[r].toff) }
	:: d_step { rep[r].tph == 0 && rep[r].own[1] && !rep[r].tlo[1] && FINAT(r, 1) ->
		prefixend(r, 1); rep[r].tph = 1; rep[r].tpart = 1; rep[r].toff = k_; k_ = 0;
		printf("MSC: r%d ticker commit (a): p1's finished prefix ends at %d\n", r, rep[r].toff) }
	:: d_step { rep[r].tph == 1 ->
		printf("MSC: r%d ticker commit (b): reads the group's committed offset of p%d: %d\n", r, rep[r].tpart, committed[rep[r].tpart]);
		groupcheck(r, rep[r].tpart, rep[r].toff);
		if
		:: f_ -> rep[r].tph = 2
		:: else -> rep[r].tph = 0; rep[r].tpart = 0; rep[r].toff = 0
		fi;
		f_ = 0 }
	:: d_step { rep[r].tph == 2 ->
		p_ = rep[r].tpart; x_ = rep[r].toff;
		rep[r].tph = 0; rep[r].tpart = 0; rep[r].toff = 0;
		printf("MSC: r%d ticker commit (c): sends p%d at %d\n", r, p_, x_);
		send(r, p_, x_);
		p_ = 0; x_ = 0 }
#endif

#ifndef NO_FENCE
	/* ---- the fence: the new owner's assignment callback
	 * (committer.assigned -> Ledger.Own) takes a new epoch of the
	 * partition, before any of its records is polled; from then on the
	 * previous owner's claims and marks of it write nothing ---- */
	:: d_step { rep[r].own[0] && rep[r].ep[0] == 0 && OWNFREE(r, 0) -> ownlands(r, 0) }
	:: d_step { rep[r].own[1] && rep[r].ep[1] == 0 && OWNFREE(r, 1) -> ownlands(r, 1) }
#endif
#ifdef RETAKE
	/* ---- the re-take's Own (committer.fenced -> c.own) lands: a new
	 * epoch, kept for the partition if it is still the assignment the
	 * coordinator's answer was about (c.parts[tp] == part), which moves
	 * the fence of its records' writes (part.epoch); then the claimer
	 * claims its batch again ---- */
	:: d_step { rep[r].rog[0] != 0 -> retake(r, 0) }
	:: d_step { rep[r].rog[1] != 0 -> retake(r, 1) }
	:: d_step { rep[r].rb != 0 && rep[r].rog[0] == 0 && rep[r].rog[1] == 0 -> reclaim(r) }
#endif

	/* ---- lost: a zombie learns it lost the partition ---- */
	:: d_step { rep[r].own[0] && rep[r].gen[0] != bgen[0] ->
		printf("MSC: r%d learns p0 was lost\n", r); abandon(r, 0) }
	:: d_step { rep[r].own[1] && rep[r].gen[1] != bgen[1] ->
		printf("MSC: r%d learns p1 was lost\n", r); abandon(r, 1) }

	/* ---- fault: revoke (cooperative rebalance moves p to q): committer.revoked
	 * commits what finished (under the commit lock), forgets p ---- */
	:: d_step { nrev > 0 && rep[q].alive && rep[r].own[0] && rep[r].gen[0] == bgen[0] && LOCKFREE(r) ->
		nrev--; printf("MSC: REVOKE p0 from r%d\n", r); commitnow(r, 0, 1); abandon(r, 0); assign(q, 0) }
	:: d_step { nrev > 0 && rep[q].alive && rep[r].own[1] && rep[r].gen[1] == bgen[1] && LOCKFREE(r) ->
		nrev--; printf("MSC: REVOKE p1 from r%d\n", r); commitnow(r, 1, 1); abandon(r, 1); assign(q, 1) }

	/* ---- fault: zombie (p moves to q, r is not told); not while r's
	 * Own of p is still to land (ZTAKEN, see ZOMBIE_IN_OWN) ---- */
	:: d_step { nzom > 0 && rep[q].alive && rep[r].own[0] && rep[r].gen[0] == bgen[0] && ZTAKEN(r, 0) ->
		nzom--; printf("MSC: ZOMBIE: p0 moves to r%d, r%d keeps working on it\n", q, r); assign(q, 0) }
	:: d_step { nzom > 0 && rep[q].alive && rep[r].own[1] && rep[r].gen[1] == bgen[1] && ZTAKEN(r, 1) ->
		nzom--; printf("MSC: ZOMBIE: p1 moves to r%d, r%d keeps working on it\n", q, r); assign(q, 1) }

	/* ---- fault: crash (memory gone, partitions reassigned) ---- */
	:: d_step { ncrash > 0 && rep[r].alive && rep[q].alive ->
		ncrash--;
		printf("MSC: CRASH of r%d\n", r);
		if
		:: rep[r].own[0] && rep[r].gen[0] == bgen[0] -> assign(q, 0)
		:: else
		fi;
		if
		:: rep[r].own[1] && rep[r].gen[1] == bgen[1] -> assign(q, 1)
		:: else
		fi;
		rep[r].alive = 0;
		rep[r].own[0] = 0; rep[r].gen[0] = 0; rep[r].pos[0] = 0; rep[r].cmt[0] = 0; rep[r].tlo[0] = 0;
		rep[r].own[1] = 0; rep[r].gen[1] = 0; rep[r].pos[1] = 0; rep[r].cmt[1] = 0; rep[r].tlo[1] = 0;
#ifndef NO_FENCE
		rep[r].ep[0] = 0; rep[r].ep[1] = 0;
#endif
#ifdef RETAKE
		rep[r].rog[0] = 0; rep[r].rog[1] = 0; rep[r].rb = 0;
#endif
		rep[r].tph = 0; rep[r].tpart = 0; rep[r].toff = 0;
		for (c_ : 0 .. NREC-1) { rep[r].st[c_] = 0 }
		c_ = 0;
		rep[r].dlpend = 0;
		clearjob(r, 0) }

	/* ---- fault: restart after a crash; the rejoin moves one partition to r ---- */
	:: d_step { !rep[r].alive && nrestart > 0 && rep[q].own[0] && rep[q].gen[0] == bgen[0] && LOCKFREE(q) ->
		nrestart--; rep[r].alive = 1;
		printf("MSC: RESTART of r%d; rebalance revokes p0 from r%d\n", r, q);
		commitnow(q, 0, 1); abandon(q, 0); assign(r, 0) }
	:: d_step { !rep[r].alive && nrestart > 0 && rep[q].own[1] && rep[q].gen[1] == bgen[1] && LOCKFREE(q) ->
		nrestart--; rep[r].alive = 1;
		printf("MSC: RESTART of r%d; rebalance revokes p1 from r%d\n", r, q);
		commitnow(q, 1, 1); abandon(q, 1); assign(r, 1) }

	/* ---- the run is over ---- */
	:: d_step { ALLDONE && REPLAYDONE && rep[r].jph[0] == J_NONE && !rep[r].dlpend && rep[r].tph == 0 && FENCEFREE(r) ->
		finalcheck(q)
#ifdef SIGNAL
		; nend++
#endif
		};
		break
	od
}

#ifdef FAILED_ONLY
/* Temporal: a running execution closes, completed or (once) failed */
active proctype temporal() {
end:	do
	:: d_step { xlast[0] == X_RUNNING && nfail > 0 -> nfail--; xlast[0] = X_FAILED;
		printf("MSC: Temporal: execution %d of wid0 FAILED\n", exec[0]) }
	:: d_step { xlast[0] == X_RUNNING -> xlast[0] = X_COMPLETED;
		printf("MSC: Temporal: execution %d of wid0 completed\n", exec[0]) }
	od
}
#endif

#ifdef SIGNAL
#ifdef SIG_NO_WFDEDUP
#define SEEN 0
#else
#define SEEN eseen
#endif
#ifdef SIG_UNDRAINED
#define DRAINED 1
#else
#define DRAINED (epend == 0)
#endif
/* Temporal and the entity workflow (the workflow side of signal routes,
 * branch h-sigwf; its function names are not fixed yet) */
active proctype entity() {
end:	do
	/* the workflow handles an accepted signal: the seen-set check drops an
	 * event ID it holds, else admits the event (observed) and adds its ID */
	:: d_step { epend > 0 -> epend--;
		if
		:: SEEN ->
			printf("MSC: entity workflow: the event's ID is in the seen-set: dropped\n")
		:: else ->
			eseen = 1; nobs++;
			printf("MSC: entity workflow: event admitted (observed %d times)\n", nobs);
			assert(nobs <= 1)   /* SO: observed at most once */
		fi }
	/* continue-as-new (workflow.NewContinueAsNewError with the seen-set in
	 * its input): the new run has a fresh mutable state, so no signal
	 * request ID; the seen-set is carried. Only once every accepted signal
	 * is handled (the workflow drains its signal channel first; Temporal
	 * refuses a CAN while new signals are buffered) */
	:: d_step { eopen && DRAINED && ncan > 0 -> ncan--;
		erid = 0;
#ifdef RUNLIMIT
		efull = 0;
#endif
#ifdef SIG_UNDRAINED
		if :: epend > 0 -> printf("MSC: entity workflow: %d accepted signals not handled: lost\n", epend) :: else fi;
		epend = 0;
#endif
		printf("MSC: entity workflow: CONTINUE-AS-NEW (request IDs reset; seen-set carried: %d)\n", eseen) }
	/* the run completes: a later SignalWithStart starts a new run, with no
	 * seen-set and no request ID */
	:: d_step { eopen && DRAINED && nclose > 0 -> nclose--;
		eopen = 0; erid = 0; eseen = 0;
#ifdef SIG_UNDRAINED
		if :: epend > 0 -> printf("MSC: entity workflow: %d accepted signals not handled: lost\n", epend) :: else fi;
		epend = 0;
#endif
		printf("MSC: entity workflow: run COMPLETED (closed)\n") }
#ifdef RUNLIMIT
	/* other events' signals fill the open run to the server's limit; only
	 * while a continue-as-new is still to come (the Receiver's MaxSeen is
	 * below the server's limit) */
	:: d_step { eopen && !efull && nlimit > 0 && ncan > 0 -> nlimit--; efull = 1;
		printf("MSC: entity workflow: the run reaches its SIGNAL LIMIT (other events' signals, a backlog)\n") }
#endif
	/* the seen-set's bound evicts the event's ID (it saw that many other
	 * events since) */
	:: d_step { eseen && ndrop > 0 -> ndrop--; eseen = 0;
		printf("MSC: entity workflow: the seen-set's bound EVICTS the event's ID\n") }
	/* all is over: the event was delivered and observed exactly once */
	:: d_step { nend == NR && epend == 0 ->
		printf("MSC: the end: delivered %d, observed %d times\n", dlv, nobs);
		assert(dlv && nobs == 1) };
		break
	od
}
#endif

#ifdef REPLAY
/* dead letter c's origin, as the next replay sends it (processor/replay's
 * replayed: the dead letter's dedup-origin-*, else its coordinates) */
#ifdef REPLAY_DROP_ORIGIN
#define DORG(c) roff[c]   /* the old rule: a copy's dead letter lost its origin */
#else
#define DORG(c) rorg[c]   /* the origin travels with every copy */
#endif
/* dedup dlq replay --execute of dead letter c: the copy is appended to p0 */
#define REPLAYS(c) \
	d_step { nrep > 0 && dlw[c] && plen[0] < NREC -> nrep--; \
		rorg[plen[0]] = DORG(c); \
		printf("MSC: operator: dlq replay of rec%d's dead letter: p0@%d, origin p0@%d\n", c, plen[0], rorg[plen[0]]); \
		plen[0]++ }
/* the operator: replays dead letters (any, again and again: the whole
 * topic twice), fixes the cause of the refusals once, stops at any time */
active proctype operator() {
end:	do
	:: REPLAYS(0)
	:: REPLAYS(1)
	:: REPLAYS(2)
	:: d_step { !fixed -> fixed = 1; printf("MSC: operator: the cause of the refusals FIXED\n") }
	:: d_step { !rdone -> rdone = 1; printf("MSC: operator: done\n") }; break
	od
}
#endif

init {
	d_step {
#ifdef W4
		/* p0: [A, A'']   p1: [B, A']  -- one event ID, one workflow ID */
		plen[0] = 2; plen[1] = 2;
		pbase[0] = 0; pbase[1] = 2;
		rpart[0] = 0; roff[0] = 0; rwid[0] = 0; rhash[0] = A;
		rpart[1] = 0; roff[1] = 1; rwid[1] = 0; rhash[1] = A;
		rpart[2] = 1; roff[2] = 0; rwid[2] = 0; rhash[2] = B;
		rpart[3] = 1; roff[3] = 1; rwid[3] = 0; rhash[3] = A;
#elif defined(W2)
		/* p0: [A]   p1: [B]  -- no re-send: only redeliveries copy A */
		plen[0] = 1; plen[1] = 1;
		pbase[0] = 0; pbase[1] = 1;
		rpart[0] = 0; roff[0] = 0; rwid[0] = 0; rhash[0] = A;
		rpart[1] = 1; roff[1] = 0; rwid[1] = 0; rhash[1] = B;
#elif defined(WA)
		/* p0: [A]   p1: [A']  -- the event and a cross-partition re-send */
		plen[0] = 1; plen[1] = 1;
		pbase[0] = 0; pbase[1] = 1;
		rpart[0] = 0; roff[0] = 0; rwid[0] = 0; rhash[0] = A;
		rpart[1] = 1; roff[1] = 0; rwid[1] = 0; rhash[1] = A;
#elif defined(REPLAY)
		/* p0: [A] and two slots for replayed copies; p1 empty */
		plen[0] = 1; plen[1] = 0;
		pbase[0] = 0; pbase[1] = NREC;
		for (c_ : 0 .. NREC-1) {
			rpart[c_] = 0; roff[c_] = c_; rwid[c_] = 0; rhash[c_] = A
		}
		c_ = 0; rorg[0] = 0;
#elif defined(TXN)
		/* p0: [X, M]   p1: [A, C]  -- X (hash B, the event's ID) was written
		 * in a transaction that aborted, M is its abort marker; A was
		 * written in a transaction that committed, C is its commit marker */
		plen[0] = 2; plen[1] = 2;
		pbase[0] = 0; pbase[1] = 2;
		rpart[0] = 0; roff[0] = 0; rwid[0] = 0; rhash[0] = B; abrt[0] = 1;
		rpart[1] = 0; roff[1] = 1; rwid[1] = 0; rhash[1] = A; ctl[1] = 1;
		rpart[2] = 1; roff[2] = 0; rwid[2] = 0; rhash[2] = A;
		rpart[3] = 1; roff[3] = 1; rwid[3] = 0; rhash[3] = A; ctl[3] = 1;
		/* avl: records a poll can return from each offset on */
		for (c_ : 0 .. NREC-1) {
			avl[c_] = 0;
			for (o_ : c_ .. pbase[rpart[c_]] + plen[rpart[c_]] - 1) {
				if
				:: !SKIPPED(o_) -> avl[c_]++
				:: else
				fi
			}
		}
		c_ = 0; o_ = 0;
#else
		/* p0: [A]   p1: [B, A']  -- one event ID, so one workflow ID;
		 * A' is a cross-partition re-send of A, B a conflicting copy */
		plen[0] = 1; plen[1] = 2;
		pbase[0] = 0; pbase[1] = 1;
		rpart[0] = 0; roff[0] = 0; rwid[0] = 0; rhash[0] = A;
		rpart[1] = 1; roff[1] = 0; rwid[1] = 0; rhash[1] = B;
		rpart[2] = 1; roff[2] = 1; rwid[2] = 0; rhash[2] = A;
#endif
#ifdef RUNLIMIT
		/* the entity's run is open: other events went to it */
		eopen = 1;
#endif
		bgen[0] = 1; bgen[1] = 1;
		rep[0].alive = 1; rep[0].own[0] = 1; rep[0].gen[0] = 1;
		rep[1].alive = 1; rep[1].own[1] = 1; rep[1].gen[1] = 1
#ifndef NO_FENCE
		/* the first assignment's Own has taken epoch 1 of each partition */
		; lep[0] = 1; lep[1] = 1; rep[0].ep[0] = 1; rep[1].ep[1] = 1
#endif
#ifdef GEN_OWN
		/* ... in generation 1 */
		; lgo[0] = 1; lgo[1] = 1
#endif
	};
	atomic { run replica(0); run replica(1) }
}

/* Liveness (check with -a -f): a pending claim is eventually started
 * (PERM: or dead_lettered). */
#ifdef PERM
ltl live { [] ((lst[0] == L_PENDING) -> <> (lst[0] == L_STARTED || lst[0] == L_DEAD)) }
#else
ltl live { [] ((lst[0] == L_PENDING) -> <> (lst[0] == L_STARTED)) }
#endif
