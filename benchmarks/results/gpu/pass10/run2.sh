#!/usr/bin/env bash
# GPU pass 10, second run (same H200 kind): after run.sh, with the step graph on for CUDA. Here: a
# rewrite of the final choice's record (five kernels a step on the device, parents and sums worked
# out once on the CPU at the end; not kept, as run2/record_rewrite.patch) and its tests on CUDA; the
# record's cost (final_choice "model" against "pmi") with the rewrite in the tree, and in the same
# command with the record as shipped (.old: the tree's pmi_decode with final_choice.py of commit
# e669b08, not committed); and issue 27's BART-base and GPT-2 small rows with every default on.
#
#     git apply benchmarks/results/gpu/pass10/run2/record_rewrite.patch   (the tree as it ran)
#     mkdir -p .old && cp -r pmi_decode .old/ && git show e669b08:pmi_decode/final_choice.py > .old/pmi_decode/final_choice.py
#     OUT=/some/folder bash benchmarks/results/gpu/pass10/run2.sh
source benchmarks/results/gpu/parts.sh
part record_tests 60 env PMI_DECODE_TEST_DEVICE=cuda python3 -m pytest -q -p no:cacheprovider -n 4 \
    tests/test_final_choice.py tests/test_step_graph.py
AB="python3 benchmarks/switch_ab.py --switch final-choice --device cuda --new-tokens 64 --repeats 7 --batch 1
    --model bart-base --dtype float32 --beams 4"
part record_new 45 $AB --output-dir "$R/record_new"
part record_before 45 env PYTHONPATH=$PWD/.old $AB --output-dir "$R/record_before"
DS="python3 benchmarks/decode_speed.py --device cuda --new-tokens 64 --output-dir $R --repeats 3 --datasets topicalchat
    --modes greedy beam --batch-sizes 1 16 --methods default"
part bart_base 60 $DS --models bart-base --dtype float32 --name bart_base
part gpt2_small 50 $DS --models gpt2-small --dtype float32 --name gpt2_small
cat "$R/parts.txt"
