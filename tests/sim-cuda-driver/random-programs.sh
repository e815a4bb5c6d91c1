#!/usr/bin/env bash
# Runs the random safe programs against the simulated driver: random-programs.sh [CASES [SEED]].
# CASES defaults to 10000 (what `cargo test --workspace` runs), SEED to the test's fixed one;
# SIM_BACKTRACES=1 puts the Rust call stack of every site in the reports (about a third slower).
set -euo pipefail
cd "$(dirname "$0")/../.."
export SIM_CASES="${1:-10000}"
if [ $# -ge 2 ]; then export SIM_SEED="$2"; fi
exec cargo test -p sim-cuda-driver --test random_programs --locked -- --nocapture \
    random_safe_programs_make_no_report_in_a_b_or_c
