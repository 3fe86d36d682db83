#!/usr/bin/env bash
# Client instructions per lock+unlock cycle, counted by callgrind, for redmutex and its floors.
#
# Wall-clock CPU time on a shared 2-core machine moves 10-20 % between runs; instruction counts do
# not. Each contender runs the compare benchmark twice under callgrind (2 s and 6 s measured, one
# round), and the difference in instructions divided by the difference in cycles is the cost of
# one cycle: start-up, connecting and warm-up cancel out. Only the client process is counted (the
# redis-server nodes are other processes).
#
# Usage: bash benches/instructions.sh [runtime] [workload]
#   runtime:  current (default) or multi;  workload: uncontended-32 (default), uncontended-1, ...
# Takes about 2 minutes per contender. Needs valgrind (Debian's package valgrind; installed here
# when running as root with apt-get).
#   CONTENDERS='redmutex default;floor wait-all' measures only those (separated by ';');
#   BENCH_BINARY=path measures an already built compare benchmark (say, one built from another
#   commit, saved aside), to compare two builds run by run.
# Each contender's count is divided by that of the last baseline before it in the list: a floor,
# or a client of standalone members for the cluster members' rows, e.g. what routing costs:
#   CONTENDERS='redmutex 1 standalone;redmutex 1 cluster' bash benches/instructions.sh
#   SECTION=nodes-9 measures the rows of an opt-in section instead (here the node-count rows at
#   9 nodes; the word is added to BENCH_ONLY).
# The library is built as a crate that depends on it gets it: this package alone (`-p redmutex`),
# so that no other member of the workspace adds its features (the command crate turns on
# `metrics`, and `cargo bench --workspace` would build the library with it). The features it was
# built with are printed. FEATURES passes cargo's feature flags to measure another build:
#   FEATURES='--no-default-features' (no `cluster`), FEATURES='--features metrics' (the metrics
#   calls with no recorder installed: the benchmark installs none).
# BENCH_SHORT_SECS and BENCH_LONG_SECS (2 and 6) set the two runs' lengths: under valgrind a 6 s
# run completes only some hundreds of cycles, and how many requests share a wake-up moves with
# the machine's load, so two builds compared within a few percent need longer runs, interleaved.
set -euo pipefail
cd "$(dirname "$0")/.."
runtime=${1:-current}
workload=${2:-uncontended-32}

if ! command -v valgrind >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "installing Debian's valgrind package" >&2
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends valgrind
    else
        echo "valgrind is missing: install Debian's package valgrind (apt-get install valgrind)" >&2
        exit 1
    fi
fi

if [ -n "${BENCH_BINARY:-}" ]; then
    binary=$BENCH_BINARY
    echo "library features: those $binary was built with" >&2
else
    read -r -a feature_flags <<<"${FEATURES:-}"
    if ! build=$(cargo bench -p redmutex --bench compare --no-run --message-format=json \
        "${feature_flags[@]}"); then
        echo "could not build the compare benchmark (cargo bench -p redmutex --bench compare --no-run ${FEATURES:-})" >&2
        exit 1
    fi
    binary=$(grep -o '"executable":"[^"]*"' <<<"$build" | tail -n 1 | cut -d'"' -f4)
    features=$(grep '"name":"redmutex","src_path":"[^"]*/src/lib.rs"' <<<"$build" |
        grep -o '"features":\[[^]]*\]' | tail -n 1 | cut -d: -f2 | tr -d '[]"' | sed 's/,/, /g')
    echo "library features: ${features:-none}" >&2
fi
if [ -z "$binary" ] || [ ! -x "$binary" ]; then
    echo "no compare benchmark to run (${binary:-cargo named none})" >&2
    exit 1
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Prints the instructions and cycles of one callgrind run of one contender.
measure() {
    local who=$1 secs=$2 out="$work/run"
    if ! BENCH_ROUNDS=1 BENCH_MEMORY_LOCKS=0 BENCH_SECS=$secs \
        BENCH_ONLY="$runtime,$workload,$who${SECTION:+,$SECTION}" \
        valgrind --tool=callgrind --callgrind-out-file="$out.cg" "$binary" --bench \
        >"$out.txt" 2>"$out.err"; then
        echo "the benchmark failed under valgrind ($who, $secs s):" >&2
        tail -n 20 "$out.err" >&2
        return 1
    fi
    # The benchmark prints one JSON line per row; the selection must be exactly one good row.
    local rows
    rows=$(grep '"kind":"cycles"' "$out.txt" || true)
    if [ "$(grep -c . <<<"$rows")" != 1 ] || ! grep -q '"error":null' <<<"$rows"; then
        echo "expected one row without error for \"$runtime $workload $who\", got:" >&2
        echo "${rows:-nothing}" >&2
        return 1
    fi
    local instructions cycles
    instructions=$(grep -o 'Collected : [0-9]*' "$out.err" | grep -o '[0-9]*$')
    cycles=$(grep -o '"cycles":[0-9]*' <<<"$rows" | cut -d: -f2)
    echo "$instructions $cycles"
}

printf '%-22s %14s %10s\n' "contender" "instr/cycle" "vs base"
base_cost=0
IFS=';' read -r -a contenders <<<"${CONTENDERS:-floor wait-all;redmutex default;floor quorum;redmutex fail-fast}"
for who in "${contenders[@]}"; do
    # Not `read < <(measure ...)`: a failure in a process substitution would not stop the script.
    short=$(measure "$who" "${BENCH_SHORT_SECS:-2}")
    long=$(measure "$who" "${BENCH_LONG_SECS:-6}")
    read -r short_instructions short_cycles <<<"$short"
    read -r long_instructions long_cycles <<<"$long"
    if [ "$long_cycles" -le "$short_cycles" ]; then
        echo "$who: the 6 s run completed no more cycles than the 2 s run" >&2
        exit 1
    fi
    cost=$(((long_instructions - short_instructions) / (long_cycles - short_cycles)))
    case $who in
        floor* | *standalone)
            base_cost=$cost
            printf '%-22s %14d %10s\n' "$who" "$cost" "-"
            ;;
        *)
            printf '%-22s %14d %10s\n' "$who" "$cost" \
                "$(awk -v a="$cost" -v b="$base_cost" 'BEGIN { if (b == 0) print "-"; else printf "%.3f", a / b }')"
            ;;
    esac
done
echo "($runtime-thread runtime, $workload; ${BENCH_LONG_SECS:-6} s minus ${BENCH_SHORT_SECS:-2} s runs; the client process only)"
