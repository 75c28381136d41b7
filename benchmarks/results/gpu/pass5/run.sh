#!/usr/bin/env bash
# The fifth GPU pass as it ran (an H100), from the repository root:
#
#     OUT=/some/folder bash benchmarks/results/gpu/pass5/run.sh      (the CLI part needs the folder .gpu beside the code)
#
# then, on the same warm machine, the second command at the end of this file.
source benchmarks/results/gpu/parts.sh
SPEED="python3 benchmarks/decode_speed.py --device cuda --new-tokens 64 --repeats 2 --output-dir $R --methods default packed"
part packed_570 190 $SPEED --models llama-1.7b --dtype bfloat16 --datasets topicalchat --modes greedy beam sampling \
    --batch-sizes 1 8 16 --name packed_570
part packed_doclen 140 $SPEED --models llama-1.7b --dtype bfloat16 --datasets topicalchat --modes beam \
    --batch-sizes 8 --doc-tokens 512 1024 2048 --name packed_doclen
part save_model 25 python3 benchmarks/save_random_model.py --model smollm2-135m --tokenizer .gpu/smollm2_tokenizer \
    --output /tmp/rand135 --dtype bfloat16 --device cuda
part cli_e2e 120 python3 benchmarks/cli_throughput.py --input benchmarks/fixtures/topicalchat_valid_rare_100.jsonl \
    --dialogues 60 --parts end_to_end --repeats 1 --model /tmp/rand135 --device cuda --dtype bfloat16 \
    --cli-defaults --also-packed --output-dir "$R/cli_e2e"
part exactness_packed 70 env PMI_DECODE_TEST_DEVICE=cuda python3 -m pytest -q -p no:cacheprovider $XDIST \
    tests/test_packed_path.py
cat "$R/parts.txt"
# The second command (the packed_doclen and cli_e2e files of pass5/ are its; the first run's are *_run1*):
#   export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True; source benchmarks/results/gpu/parts.sh
#   part save_model 25 ...as above...; part cli_e2e 150 ...as above...
#   part packed_doclen 130 ...as above, --doc-tokens 512 1024 2048...
