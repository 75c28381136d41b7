#!/usr/bin/env bash
# The seventh GPU pass, sized from the sixth (an H100) to fit one command of under ten minutes:
#
#     OUT=/some/folder bash benchmarks/results/gpu/next_run.sh
#
# What pass 6 left: beam 4 batch 8 at a 4k-token document (plain decoding ran out of memory there
# because the packed path left its cache in a reference cycle, fixed since); beam 4 at batch 16
# (1.17x), with 3 repeats, and the packed path's beam search with and without the generated-positions
# reorder (same process); the grouped-query model at batch 1 (1.31x packed against 1.25x paired)
# with three repeats (pass 6 already had the grouped mask made once per step); BART-base's added ~1.9 ms a step, profiled (host side
# and device side) at batch 1. Times on the H100: a Llama case with two methods 10-30 s, model set-up
# ~20 s, a 4k beam-search case ~60 s, a profile of three paths ~60 s.
# (benchmarks/generated_reorder.py, used below, is now benchmarks/switch_ab.py --switch generated-reorder:
# the same options and the same JSON.)
source benchmarks/results/gpu/parts.sh
export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True  # the long documents fragment the allocator
SPEED="python3 benchmarks/decode_speed.py --device cuda --new-tokens 64 --output-dir $R"
# first: the changes since pass 6 (the cache-cycle fix, the generated-positions reorder) exact on CUDA
part exactness_cuda 110 env PMI_DECODE_TEST_DEVICE=cuda python3 -m pytest -m exactness -q -p no:cacheprovider ${XDIST/6/8} tests
part llama_doclen_4k 120 $SPEED --repeats 2 --models llama-1.7b --dtype bfloat16 --datasets topicalchat --modes beam \
    --batch-sizes 8 --doc-tokens 4096 --methods default --name llama_doclen_4k
part llama_beam_b16 100 $SPEED --repeats 3 --models llama-1.7b --dtype bfloat16 --datasets topicalchat --modes beam \
    --batch-sizes 16 --methods default paired --name llama_beam_b16
part generated_reorder 80 python3 benchmarks/generated_reorder.py --model llama-1.7b --dtype bfloat16 --device cuda \
    --batch 16 --new-tokens 64 --repeats 2 --output-dir "$R/generated_reorder"
part smollm2_gqa_b1 70 $SPEED --repeats 3 --models smollm2-135m --dtype bfloat16 --datasets topicalchat \
    --modes greedy beam --batch-sizes 1 --methods default paired --name smollm2_gqa_b1
part bart_profile 100 python3 benchmarks/profile_packed.py --device cuda --model bart-base --dtype float32 --mode greedy \
    --batch 1 --new-tokens 16 --paths plain default --sync-debug --output-dir "$R/bart_profile"
cat "$R/parts.txt"
