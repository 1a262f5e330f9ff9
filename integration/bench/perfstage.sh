#!/usr/bin/env bash
# perfstage.sh: Linux perf around each stage process of a benchmark run, for
# what a Go CPU profile does not show (context switches, the runtime's
# sysmon thread, syscalls by caller). Give it to dedup-bench as the stage
# executable; it runs the real one under perf, one output per stage:
#
#   PERF_MODE=stat  STAGE_BIN=$PWD/bin/dedup-bench bin/dedup-bench -stage-exe integration/bench/perfstage.sh \
#       -stages backlog,raw-starts -dup 0 -reps 1 -records 6000 -raw-starts 6000 -latency 0ms=0s/0s -out /tmp/perf-run
#
# PERF_MODE: stat (counts: syscalls, context switches, CPU; the default),
# sched (perf record -g of context switches and syscalls: who sleeps and
# who writes), cpu (perf record -g at 4000 Hz). PERF_OUT: the directory
# (default /tmp/perfstage), one NAME-PID.txt or NAME-PID.data per stage.
# Read a .data with `perf report -i FILE --stdio --no-children --sort sym`.
# perf adds its own cost: compare stages of one run, never with a report.
# Needs Linux perf (Debian: linux-perf) and the right to trace (root, or
# kernel.perf_event_paranoid <= 1); nothing in make test or make bench uses it.
set -euo pipefail
name=$(echo "$*" | sed 's/.*-name \([^ ]*\).*/\1/')
out=${PERF_OUT:-/tmp/perfstage}
mkdir -p "$out"
bin=${STAGE_BIN:?STAGE_BIN: the dedup-bench binary whose stages to run}
case "${PERF_MODE:-stat}" in
stat)
	exec perf stat -e 'syscalls:sys_enter_write,syscalls:sys_enter_read,syscalls:sys_enter_futex,syscalls:sys_enter_epoll_pwait,syscalls:sys_enter_nanosleep,context-switches,task-clock' \
		-o "$out/$name-$$.txt" -- "$bin" "$@" ;;
sched)
	exec perf record -q -g -e 'sched:sched_switch,syscalls:sys_enter_futex,syscalls:sys_enter_nanosleep,syscalls:sys_enter_epoll_pwait,syscalls:sys_enter_write,syscalls:sys_enter_read' \
		-o "$out/$name-$$.data" -- "$bin" "$@" ;;
cpu)
	exec perf record -q -F 4000 -g -e cpu-clock -o "$out/$name-$$.data" -- "$bin" "$@" ;;
*)
	echo "PERF_MODE: stat, sched or cpu, not $PERF_MODE" >&2
	exit 2 ;;
esac
