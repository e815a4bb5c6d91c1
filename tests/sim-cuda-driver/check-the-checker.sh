#!/usr/bin/env bash
# Checks the checker: for each fix of the stream rule that the simulator can reach, a scratch
# copy of the workspace with that fix taken out must make the random programs fail.
#
# Usage (from anywhere in the repository):
#   tests/sim-cuda-driver/check-the-checker.sh [CASES]
# Each fix is taken out by one substitution in a scratch worktree (never in this checkout); the
# random programs then run CASES programs (default 10000, as CI runs), and with them the
# regression programs they found (shrunk), and must report. Prints one line per
# fix and exits non-zero when a fix taken out went unnoticed.
set -euo pipefail
root=$(git rev-parse --show-toplevel)
cases=${1:-10000}
scratch=$(mktemp -d)
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$root/target}/check-the-checker
trap 'git -C "$root" worktree remove --force "$scratch/tree" >/dev/null 2>&1 || true; rm -rf "$scratch"' EXIT
git -C "$root" worktree add --detach "$scratch/tree" HEAD >/dev/null 2>&1

# name | file | perl substitution that takes the fix out
fixes=(
  "H1: the first use on another stream waits for the memory's own stream|cuda-core/src/track/stream_uses.rs|s/wait_for\(stream, own\)\?;//"
  "H1: set_stream orders the new stream after the old one|cuda-core/src/memory/buffer.rs|s/crate::track::wait_for\(stream, &self\.stream\)\?/crate::track::Ordered::Waited/"
  "F6: a release waits for the other streams the memory was used on|cuda-core/src/track/stream_uses.rs|s/(wait_for\(stream, own\)\?;\n\s*\}\n(?:.*\n){2})\s*if !noted\.streams\.contains\(stream\) \{\n\s*noted\.streams\.push\(stream\.clone\(\)\);\n\s*\}\n/\$1/"
  "pinned: the host waits for the copies in flight before it reads or writes|cuda-core/src/track/host_uses.rs|s/Some\(state\) => lock\(state\)\.wait\(write\),/Some(_) => Ok(()),/"
  "H2: a graph launch is refused while the host holds a guard of a pinned buffer it uses|cuda-core/src/track/host_uses.rs|s/if u\.host_writer \|\| \(access\.writes && u\.host_readers > 0\) \{\n\s*return Err\(.*?\)\);\n\s*\}//s"
  "F7: memory dropped inside an NCCL group that uses it goes back only once the group has queued its calls|cuda-core/src/track/stream_uses.rs|s/(groups\.retain\(\|&g\| super::scopes::is_open\(g\)\);\n\s*)groups\.first\(\)\.copied\(\)/\${1}None/"
  "capture: a buffer that captured work uses is given back once the graphs holding it are gone|cuda-core/src/memory/buffer.rs|s/if let Some\(cell\) = self\.uses\.take_retained\(\) \{\n\s*cell\.deposit\(self\.late_release\(\)\);\n\s*return Ok\(\(\)\);\n\s*\}//"
  "F9: dropping a mapping waits for the work queued through its views before it unmaps|cuda-core/src/vmm/mapping.rs|s/if let Err\(e\) = self\.uses\.synchronize_for_release\(\) \{\n\s*self\.range\.context\(\)\.defer\(e\.dropping\(.*?\)\);\n\s*return;\n\s*\}//"
  "capture, pinned: a pinned buffer whose copies a graph holds is given back once the graph is gone|cuda-core/src/memory/pinned.rs|s/        if self\.uses\.is_shared\(\) && self\.hand_over_release\(\) \{\n            return;\n        \}\n//"
)

status=0
for fix in "${fixes[@]}"; do
  IFS='|' read -r name file edit <<<"$fix"
  git -C "$scratch/tree" checkout -q -- .
  before=$(sha1sum "$scratch/tree/$file")
  perl -0pi -e "$edit" "$scratch/tree/$file"
  if [ "$(sha1sum "$scratch/tree/$file")" = "$before" ]; then
    echo "STALE   $name: the substitution no longer matches $file"
    status=1
    continue
  fi
  if (cd "$scratch/tree" && SIM_CASES=$cases cargo test -q -p sim-cuda-driver --test random_programs \
        >"$scratch/out" 2>&1); then
    echo "MISSED  $name: $cases programs made no report"
    status=1
  else
    report=$(grep -m1 -oE 'seed [0-9]+: a safe program made the checker report|^---- [a-z0-9_]+' "$scratch/out" || echo "failed to build or run")
    bugs=$(grep -m1 -oE '^\[[0-9]+, [0-9]+, [0-9]+\]' "$scratch/out" || true)
    echo "CAUGHT  $name: $report, reports (a, b, c) = ${bugs:-?}"
  fi
done
exit $status
