#!/usr/bin/env bash
# The next GPU pass (the fifth), sized from the third and fourth, in one command of about 9 minutes:
#
#     OUT=/some/folder bash benchmarks/results/gpu/next_run.sh      (carry .gpu for the last part)
#
# The packed path with its contiguous cache appends (pass 4 found the slow torch.cat) against the
# default (paired) path on the grid: Llama-1.7B shape, bfloat16, greedy / beam 4 / sampling
# at batch 1, 8, 16 and ~570 prompt tokens; beam 4 batch 8 at 0.5k-4k documents; then the command
# end to end. If packed is at or below paired throughout, `--packed auto` should take it on GPUs
# too (pmi_decode/batch/decode.py, _packed_for). Times on the H200: a Llama case with 3 methods and
# 2 repeats 15-45 s; the CLI's plain run 45 s.
source benchmarks/results/gpu/parts.sh
SPEED="python3 benchmarks/decode_speed.py --device cuda --new-tokens 64 --repeats 2 --output-dir $R --methods default packed"
part packed_570 170 $SPEED --models llama-1.7b --dtype bfloat16 --datasets topicalchat --modes greedy beam sampling \
    --batch-sizes 1 8 16 --name packed_570
part packed_doclen 170 $SPEED --models llama-1.7b --dtype bfloat16 --datasets topicalchat --modes beam \
    --batch-sizes 8 --doc-tokens 512 1024 2048 4096 --name packed_doclen
part save_model 20 python3 benchmarks/save_random_model.py --model smollm2-135m --tokenizer .gpu/smollm2_tokenizer \
    --output /tmp/rand135 --dtype bfloat16 --device cuda
part cli_e2e 130 python3 benchmarks/cli_throughput.py --input benchmarks/fixtures/topicalchat_valid_rare_100.jsonl \
    --dialogues 100 --parts end_to_end --repeats 1 --model /tmp/rand135 --device cuda --dtype bfloat16 \
    --cli-defaults --also-packed --output-dir "$R/cli_e2e"
cat "$R/parts.txt"
