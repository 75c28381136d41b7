#!/usr/bin/env bash
# The next GPU pass, sized from the first one (run.sh cut its Llama parts at their limits): the
# default path only (plain decoding beside it), every mode, in one ~8-minute command:
#
#     OUT=/some/folder bash benchmarks/results/gpu/next_run.sh      (carry .gpu for the last part)
#
# Measured times on the H200 of the first pass: exactness 86 s with 6 workers; a Llama case
# with 2 methods and 2 repeats 10-25 s (longer at 4k tokens); the CLI's plain run 45 s.
source benchmarks/results/gpu/parts.sh
part exactness_cuda 110 env PMI_DECODE_TEST_DEVICE=cuda python3 -m pytest -m exactness -q -p no:cacheprovider $XDIST tests
SPEED="python3 benchmarks/decode_speed.py --device cuda --new-tokens 64 --repeats 2 --output-dir $R --methods default"
part llama_570 150 $SPEED --models llama-1.7b --dtype bfloat16 --datasets topicalchat --modes greedy sampling beam \
    --batch-sizes 1 8 16 --name llama_570
part llama_doclen 110 $SPEED --models llama-1.7b --dtype bfloat16 --datasets topicalchat --modes beam \
    --batch-sizes 8 --doc-tokens 512 1024 2048 4096 --name llama_doclen
part bart_base 40 $SPEED --models bart-base --dtype float32 --datasets topicalchat --modes greedy sampling beam \
    --batch-sizes 1 16 --name bart_base
part save_model 20 python3 benchmarks/save_random_model.py --model smollm2-135m --tokenizer .gpu/smollm2_tokenizer \
    --output /tmp/rand135 --dtype bfloat16 --device cuda
part cli_e2e 130 python3 benchmarks/cli_throughput.py --input benchmarks/fixtures/topicalchat_valid_rare_100.jsonl \
    --dialogues 100 --parts end_to_end --repeats 1 --model /tmp/rand135 --device cuda --dtype bfloat16 \
    --cli-defaults --output-dir "$R/cli_e2e"
cat "$R/parts.txt"
