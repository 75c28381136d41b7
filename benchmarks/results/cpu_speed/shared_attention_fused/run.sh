#!/usr/bin/env bash
# The shared attention's fused form (this commit) against its first form (31cccf1), each as
# switch_ab's `shared` beside the unchanged per-row path and plain decoding in its own process,
# alternated twice (fused, first form, fused, first form) so the machine's drift between runs shows.
#     git worktree add /tmp/base_31cccf1 31cccf1
#     BASE=/tmp/base_31cccf1 bash benchmarks/results/cpu_speed/shared_attention_fused/run.sh
set -u
BASE=${BASE:?set BASE to a checkout of 31cccf1}
OUT=benchmarks/results/cpu_speed/shared_attention_fused
run() {  # $1: checkout whose script and pmi_decode run, $2: result prefix
  for batch in 1 4; do
    PYTHONPATH=$1 python "$1/benchmarks/switch_ab.py" --switch shared-positions --model embedded --batch $batch \
        --beams 4 --new-tokens 40 --repeats 5 --output-dir /tmp/shared_attention_fused_$2
    for f in /tmp/shared_attention_fused_$2/*.json; do cp "$f" "$OUT/$2_$(basename "$f")"; done
  done
}
run "$PWD" fused_run1
run "$BASE" first_form_run1
run "$PWD" fused_run2
run "$BASE" first_form_run2
