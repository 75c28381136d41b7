#!/usr/bin/env bash
# The measurements of benchmarks/results/cpu_speed/ (see README.md there). Run from the checkout
# of the new code; BASE is a checkout of the commit before (git worktree add BASE <commit>).
# Waits until no `pmi-decode generate` runs, so the timings are taken on an idle machine.
set -euo pipefail
NEW=${NEW:-$(pwd)}
BASE=${BASE:?set BASE to a checkout of the previous commit}
OUT=benchmarks/results/cpu_speed
wait_idle() { while pgrep -f "pmi-decode generate" > /dev/null; do sleep 20; done; }
speed() {  # $1: checkout whose script and pmi_decode run, $2: output folder
  wait_idle
  PYTHONPATH=$1 python "$1/benchmarks/decode_speed.py" --models bart-base --modes beam greedy --batch-sizes 8 \
      --repeats 5 --methods plain-2x-rows separate paired --output-dir "$2"
}
speed "$NEW" $OUT/decode_speed_after
speed "$BASE" $OUT/decode_speed_before
wait_idle
PYTHONPATH=$NEW python benchmarks/deferral.py --ps 0.9 0.6 --batch-sizes 1 8 --output-dir $OUT
