#!/usr/bin/env bash
# Instructions per operation of the hot path's micro-benchmarks, this tree
# against another commit, counted by valgrind (cachegrind): the same count on
# every run, where CPU time on a shared machine moves by 10-30% (docs/benchmark.md,
# "Counting instructions"). Each benchmark runs at two fixed iteration counts;
# the difference over the difference is the count per operation, without the
# set-up. Valgrind's CPU has no SHA extensions, so SHA-256 counts more here
# than on the machine (AVX2 instead of SHA-NI): compare a change with its base,
# never with a CPU profile's shares.
#
#   integration/bench/instructions.sh [BASE]   (BASE: a commit, default HEAD)
set -euo pipefail
shopt -s inherit_errexit # a run that fails fails the script, not a row of the table
base=${1:-HEAD}
root=$(git rev-parse --show-toplevel)
cd "$root"
command -v valgrind >/dev/null || { echo "valgrind is missing: ./.ci/deps valgrind" >&2; exit 1; }
# package, benchmark, two iteration counts. The ledger's claim counts the
# client's instructions only: its throwaway PostgreSQL runs outside valgrind
# (no --trace-children).
benches=(
	"./processor BenchmarkDecide\$ 5000 25000"
	"./processor BenchmarkDispatchDuplicates\$ 200 1000"
	"./processor/eventid BenchmarkDecode\$ 5000 25000"
	"./sink/ledger BenchmarkClaimStartedRows\$ 20 100"
)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/dedup-instructions.XXXXXX")
trap 'git worktree remove --force "$tmp/base" >/dev/null 2>&1 || true; rm -rf "$tmp"' EXIT
git worktree add --detach "$tmp/base" "$base" >/dev/null 2>&1
# Valgrind's CPU has no RDTSCP either, which Go's runtime reads when a lock
# of its own is contended (runtime.cputicks): the run died of SIGILL there
# (the ledger's benchmark, with its PostgreSQL I/O, about every other run),
# and its shorter count came out as a negative count per operation.
# cpu.rdtscp=off makes cputicks fence and read RDTSC instead.
count() { # binary, benchmark, iterations -> instructions of the whole run
	local out
	if ! out=$(GOMAXPROCS=1 GODEBUG=asyncpreemptoff=1,cpu.rdtscp=off valgrind --tool=cachegrind --cache-sim=no \
		--cachegrind-out-file=/dev/null "$1" -test.run '^$' -test.bench "$2" -test.benchtime "${3}x" 2>&1); then
		printf '%s\n' "$out" | tail -20 >&2
		echo "$1 $2 at ${3}x failed under valgrind (its output's end above)" >&2
		return 1
	fi
	printf '%s\n' "$out" | awk '/I *refs:/ { gsub(",", "", $NF); print $NF }'
}
perop() { # binary, benchmark, n1, n2
	local a b
	a=$(count "$1" "$2" "$3")
	b=$(count "$1" "$2" "$4")
	echo $(((b - a) / ($4 - $3)))
}
echo "| benchmark | $(git rev-parse --short "$base") | this tree | this / base |"
echo "|---|---|---|---|"
for line in "${benches[@]}"; do
	read -r pkg bench n1 n2 <<<"$line"
	name=$(basename "$pkg")
	(cd "$tmp/base" && go test -c -o "$tmp/$name.base" "$pkg")
	go test -c -o "$tmp/$name.this" "$pkg"
	old=$(perop "$tmp/$name.base" "$bench" "$n1" "$n2")
	new=$(perop "$tmp/$name.this" "$bench" "$n1" "$n2")
	echo "| ${bench%\$} ($pkg) | $old | $new | $(awk -v a="$old" -v b="$new" 'BEGIN { printf "%.3f", b / a }') |"
done
