#!/usr/bin/env bash
# The second pass on the same warm machine, right after run.sh: the parts that run.sh's time limits
# cut (Llama beam search at ~570 tokens; documents of 2k and 4k tokens; sampling), with only
# plain decoding and the default path, 2 repeats.
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD; R=/tmp/r2; mkdir -p $R
S="python3 benchmarks/decode_speed.py --device cuda --new-tokens 64 --repeats 2 --output-dir $R --models llama-1.7b --dtype bfloat16 --datasets topicalchat"
timeout 75 $S --modes beam --batch-sizes 1 8 16 --methods default --name llama_570_beam > $R/a.log 2>&1
timeout 60 $S --modes beam --batch-sizes 8 --doc-tokens 2048 4096 --methods default --name llama_doclen_long > $R/b.log 2>&1
timeout 50 $S --modes sampling beam_sampling --batch-sizes 8 --methods default --name llama_sampling > $R/c.log 2>&1
