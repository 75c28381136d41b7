#!/usr/bin/env bash
# This commit's pmi_generate defaults against the commit before this round's step changes (fc456e1),
# alternated twice (after, before, after, before) so the machine's drift between runs shows.
#     git worktree add /tmp/base_fc456e1 fc456e1
#     BASE=/tmp/base_fc456e1 bash benchmarks/results/cpu_speed/step_changes_ab/run.sh
set -u
BASE=${BASE:?set BASE to a checkout of fc456e1}
OUT=benchmarks/results/cpu_speed/step_changes_ab
run() {  # $1: checkout whose script and pmi_decode run, $2: result name
  PYTHONPATH=$1 python "$1/benchmarks/decode_speed.py" --models bart-base smollm2-135m --modes beam greedy \
      --batch-sizes 8 --new-tokens 24 --repeats 5 --methods default --datasets faithdial --output-dir $OUT --name "$2"
}
run "$PWD" after_1
run "$BASE" before_1
run "$PWD" after_2
run "$BASE" before_2
