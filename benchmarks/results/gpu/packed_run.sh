#!/usr/bin/env bash
# The third GPU pass: CUDA exactness of every path since the first pass (paired sampling, the
# deferred step checks, the guard masks, the packed path), then the packed path (both halves in
# one row, pmi_decode/packed.py) beside the default path and plain decoding, long documents first
# (the memory target), in one command of under 9 minutes:
#
#     OUT=/some/folder bash benchmarks/results/gpu/packed_run.sh
source benchmarks/results/gpu/parts.sh
part exactness_cuda 110 env PMI_DECODE_TEST_DEVICE=cuda python3 -m pytest -m exactness -q -p no:cacheprovider $XDIST tests
SPEED="python3 benchmarks/decode_speed.py --device cuda --new-tokens 64 --repeats 2 --output-dir $R --methods default packed"
part packed_doclen 170 $SPEED --models llama-1.7b --dtype bfloat16 --datasets topicalchat --modes beam \
    --batch-sizes 8 --doc-tokens 512 1024 2048 4096 --name packed_doclen
part packed_570 170 $SPEED --models llama-1.7b --dtype bfloat16 --datasets topicalchat --modes greedy beam sampling \
    --batch-sizes 1 8 16 --name packed_570
part bart_base 40 python3 benchmarks/decode_speed.py --device cuda --new-tokens 64 --repeats 2 --output-dir $R \
    --methods default --models bart-base --dtype float32 --datasets topicalchat --modes greedy sampling beam \
    --batch-sizes 1 16 --name bart_base
cat "$R/parts.txt"
