#!/usr/bin/env bash
# The ninth GPU pass: the two model sizes of issue 27's first measurements that no pass had timed,
# GPT-2 small (float32; the packed path) and BART-large (bfloat16; the paired path), greedy and
# beam 4 at batch 1 and 16, against plain decoding in the same run. BART-base's batch-1 gap is host
# time for the paired step's added operators (pass 8); a larger model's step hides more of it.
#
#     OUT=/some/folder bash benchmarks/results/gpu/pass9/run.sh
source benchmarks/results/gpu/parts.sh
DS="python3 benchmarks/decode_speed.py --device cuda --new-tokens 64 --output-dir $R --repeats 3 --datasets topicalchat
    --modes greedy beam --batch-sizes 1 16 --methods default"
part gpt2_small 80 $DS --models gpt2-small --dtype float32 --name gpt2_small
part bart_large 100 $DS --models bart-large --dtype bfloat16 --name bart_large
cat "$R/parts.txt"
