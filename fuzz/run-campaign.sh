#!/usr/bin/env bash
# The long fuzz campaign of tensorjit with fixed execution counts (fuzz/README.md):
#   parse: 1 000 000 inputs, npy: 1 000 000 inputs, diff: 100 000 programs.
# Counts can be changed with PARSE_RUNS, NPY_RUNS and DIFF_RUNS; JOBS runs that many libFuzzer
# processes per target (the counts are per process). Needs `cargo install cargo-fuzz` and a
# nightly toolchain. Exits non-zero if any target found a crash (its input is in
# fuzz/artifacts/<target>/); prints each target's executions, time and exec/s.
set -euo pipefail
cd "$(dirname "$0")/.."

PARSE_RUNS=${PARSE_RUNS:-1000000}
NPY_RUNS=${NPY_RUNS:-1000000}
DIFF_RUNS=${DIFF_RUNS:-100000}
JOBS=${JOBS:-1}
# Per-input time limit (s): a hang is a finding.
TIMEOUT=${TIMEOUT:-10}

cargo +nightly fuzz build
status=0
summary=""
for spec in "parse:$PARSE_RUNS" "npy:$NPY_RUNS" "diff:$DIFF_RUNS"; do
    target=${spec%%:*}
    runs=${spec#*:}
    work=fuzz/corpus-run/$target
    mkdir -p "$work" "fuzz/artifacts/$target"
    log=fuzz/artifacts/$target/campaign.log
    rm -f fuzz-*.log fuzz/fuzz-*.log
    start=$(date +%s)
    # The JIT keeps its compiled code for the life of the process: leak checks are off.
    parallel=()
    if [ "$JOBS" -gt 1 ]; then parallel=(-jobs="$JOBS" -workers="$JOBS"); fi
    if cargo +nightly fuzz run "$target" "$work" "fuzz/corpus/$target" -- \
        -runs="$runs" -timeout="$TIMEOUT" -rss_limit_mb=4096 -detect_leaks=0 \
        "${parallel[@]}" -print_final_stats=1 >"$log" 2>&1; then
        result=ok
    else
        result="FAILED (see $log and fuzz/artifacts/$target/)"
        status=1
    fi
    secs=$(($(date +%s) - start))
    execs=$(grep -h '^stat::number_of_executed_units' "$log" fuzz-*.log fuzz/fuzz-*.log 2>/dev/null | awk '{s += $2} END {print s + 0}')
    rate=$((execs / (secs > 0 ? secs : 1)))
    line="$target: $execs executions in ${secs} s ($rate exec/s): $result"
    echo "$line"
    summary+="$line"$'\n'
done
echo "== totals =="
printf '%s' "$summary"
exit $status
