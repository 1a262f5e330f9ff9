#!/usr/bin/env bash
# cpugroups.sh: where a stage's CPU goes, for docs/benchmark.md's "Where the
# CPU goes in this run" tables. Merges the CPU profiles given (e.g. the
# three 0 ms repetitions of one stage, from `dedup-bench -cpuprofile DIR`),
# takes each leaf function's flat samples (`go tool pprof -top`) and sums
# them by group. With PER=N (the run's median CPU µs per workflow, per
# duplicate…), each group's share is also scaled to N.
#
#   integration/bench/cpugroups.sh bin/dedup-bench bench-out/prof/*-0ms-rep*-backlog.pprof
#   PER=330 integration/bench/cpugroups.sh bin/dedup-bench bench-out/prof/*-0ms-rep*-backlog.pprof
#
# The groups, first match wins (by the leaf function's name):
#   GC and allocation: the runtime's collector, allocator and write barriers
#   scheduling: the runtime's scheduler, timers, syscalls, netpoll, channels
#     and locks (sync too)
#   the start: gRPC, HTTP/2, protobuf, the Temporal client, sink/starter
#   deciding: processor/eventid, processor/decide, SHA-256
#   ledger: pgx, puddle, sink/ledger
#   Kafka: franz-go and its compression codecs
#   the router: the rest of dedup's own code (processor, internal)
#   the benchmark's own: integration/bench, internal/demo
#   other: the rest (memmove, maps and their hashing, contexts, reflection,
#     encoding/json, strconv…)
set -euo pipefail
if [ $# -lt 2 ]; then
	echo "usage: [PER=N] $0 BINARY PROFILE..." >&2
	exit 2
fi
bin=$(realpath "$1")
shift
profiles=()
for f in "$@"; do profiles+=("$(realpath "$f")"); done
# go tool pprof from the lab module (integration/), which links the benchmark.
top=$(cd "$(dirname "$0")/.." && go tool pprof -top -nodecount=1000000 -nodefraction=0 "$bin" "${profiles[@]}")
echo "$top" | awk -v per="${PER:-}" '
function group(f) {
	if (f ~ /^runtime\.(mallocgc|nextFree|newobject|newarray|makeslice|makemap|growslice$|gc|markroot|scanobject|scanblock|scanframe|scanstack|greyobject|findObject|wbBuf|bulkBarrier|typePointers|heapSetType|memclrNoHeapPointers|sweep|bgsweep|bgscavenge|(\(\*(mspan|mcentral|mcache|mheap|gcWork|gcControllerState|spanSet|pageAlloc|scavengerState|sweepLocked|sweepLocker|wbBuf|gcBits|pallocBits|pageCache|stackScanState|mspan)\)))/ ||
	    f ~ /^runtime\.(tryDeferToSpanScan|unpackScavChunkData|writeHeapBits|heapBitsSmall|deductAssistCredit|gcWriteBarrier|wbMove|typedmemmove|typedslicecopy|publicationBarrier|markBits|spanOf|pcvalue|funcspdelta|stkobjinit|deductSweepCredit|nextMarkBitArrayIndex|memclrNoHeapPointersChunked|scanConservative|addb|heapBits|mProf|profilealloc|freeSomeWbufs|handoff|putempty|getempty|trygetfull|getfull|shade|markrootSpans|markBitsForAddr|(\(\*gcBitsArenas\)))/ ||
	    f ~ /^internal\/runtime\/gc/ || f ~ /^runtime\.(scanObject|scanSpan|heapArenaOf|spanClass|spanHeapBits|\(\*scavengeIndex\)|\(\*atomicScavChunkData\)|(\(\*gcCPULimiterState\)))/ || f ~ /^runtime\.\(\*(mspan|mheap|mcentral|mcache)\)/)
		return "GC and allocation"
	if (f ~ /^(runtime|internal\/runtime\/[a-z\/]+|syscall|internal\/poll|internal\/sync|sync|sync\/atomic)\./ &&
	    f ~ /(gList|gQueue|waitq|cheaprand|schedule|findRunnable|findrunnable|park|ready|runq|netpoll|futex|Syscall|syscall|timer|Timer|chan|select|lock|Lock|unlock|Unlock|sema|Sema|notesleep|notewakeup|mPark|stopm|startm|wakep|execute|gogo|mcall|systemstack|casgstatus|usleep|osyield|procyield|nanotime|epoll|stealWork|checkTimers|goschedIfBusy|resetspinning|injectglist|gopark|goready|wake|Wait|Signal|Broadcast|Read|Write|Once|entersyscall|exitsyscall|reentersyscall|save|morestack|newstack|newproc|goexit|gfget|gfput|acquirep|releasep|pidle|handoffp|retake|sysmon|Load|Store|Add|Swap|CompareAndSwap|Or|And|Xadd|Cas|cas|xadd)/)
		return "scheduling"
	if (f ~ /^(google\.golang\.org\/grpc|golang\.org\/x\/net\/http2|google\.golang\.org\/protobuf|go\.temporal\.io|github\.com\/gogo|github\.com\/grpc-ecosystem|github\.com\/dedupio\/dedup\/sink\/starter)/)
		return "the start"
	if (f ~ /^(github\.com\/dedupio\/dedup\/processor\/(eventid|decide)|crypto\/sha256|crypto\/internal\/fips140\/sha256)/)
		return "deciding"
	if (f ~ /^(github\.com\/jackc|github\.com\/dedupio\/dedup\/sink\/ledger)/)
		return "ledger"
	if (f ~ /^(github\.com\/twmb\/franz-go|github\.com\/klauspost\/compress|github\.com\/pierrec\/lz4)/)
		return "Kafka"
	if (f ~ /^github\.com\/dedupio\/dedup\/(integration|internal\/demo)/)
		return "the benchmark'"'"'s own"
	if (f ~ /^github\.com\/dedupio\/dedup\//)
		return "the router"
	return "other"
}
function seconds(s,   v) {
	v = s
	if (v ~ /ms$/) { sub(/ms$/, "", v); return v / 1000 }
	if (v ~ /us$/) { sub(/us$/, "", v); return v / 1e6 }
	if (v ~ /s$/) { sub(/s$/, "", v); return v + 0 }
	return 0
}
/^Duration:/ { print "# " $0 }
started && NF >= 6 {
	name = $6
	for (i = 7; i <= NF; i++) name = name " " $i
	v = seconds($1)
	g = group(name)
	sum[g] += v
	if (ENVIRON["SHOW"] == g) print "  " g ": " $1 " " name > "/dev/stderr"
	total += v
}
/ flat  flat%/ { started = 1 }
END {
	if (total == 0) { print "no samples" > "/dev/stderr"; exit 1 }
	n = split("scheduling|GC and allocation|other|the start|the router|Kafka|deciding|ledger|the benchmark'"'"'s own", order, "|")
	printf "%-22s %10s %7s%s\n", "group", "seconds", "share", (per != "" ? "  of " per : "")
	for (i = 1; i <= n; i++) {
		g = order[i]
		if (!(g in sum)) continue
		printf "%-22s %10.3f %6.1f%%", g, sum[g], 100 * sum[g] / total
		if (per != "") printf "  %8.2f", per * sum[g] / total
		printf "\n"
	}
	printf "%-22s %10.3f\n", "total", total
}'
