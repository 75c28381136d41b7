#!/usr/bin/env bash
# The next GPU pass, sized from the third (`pass3/`), in one command of under 9 minutes:
#
#     OUT=/some/folder bash benchmarks/results/gpu/next_run.sh      (carry .gpu for the last part)
#
# First why the packed path is slow in beam search at 32-64 rows (host waits per step, counted by
# the Python line that caused them, and the profile table the third pass lost to its time limit);
# then the exactness tests once more (the projection test's seed loop), the 4k-token document, and
# the CLI end to end. Times on the H200: exactness 92 s with 6 workers; a Llama case with 3 methods
# and 2 repeats 15-45 s; the CLI's plain run 45 s.
source benchmarks/results/gpu/parts.sh
part profile_beam_b16 150 python3 benchmarks/profile_packed.py --device cuda --batch 16 --mode beam --sync-debug \
    --output-dir "$R/profile"
part exactness_cuda 110 env PMI_DECODE_TEST_DEVICE=cuda python3 -m pytest -m exactness -q -p no:cacheprovider $XDIST tests
SPEED="python3 benchmarks/decode_speed.py --device cuda --new-tokens 64 --repeats 2 --output-dir $R --methods default packed"
part packed_doclen_4k 90 $SPEED --models llama-1.7b --dtype bfloat16 --datasets topicalchat --modes beam \
    --batch-sizes 8 --doc-tokens 4096 --name packed_doclen_4k
part save_model 20 python3 benchmarks/save_random_model.py --model smollm2-135m --tokenizer .gpu/smollm2_tokenizer \
    --output /tmp/rand135 --dtype bfloat16 --device cuda
part cli_e2e 130 python3 benchmarks/cli_throughput.py --input benchmarks/fixtures/topicalchat_valid_rare_100.jsonl \
    --dialogues 100 --parts end_to_end --repeats 1 --model /tmp/rand135 --device cuda --dtype bfloat16 \
    --cli-defaults --output-dir "$R/cli_e2e"
cat "$R/parts.txt"
