#!/usr/bin/env bash
# The GPU checks of issues 25 and 27 in one pass, sized to fit one 10-minute command on a GPU
# machine (python3 with CUDA torch and transformers there; nothing is installed). From the checkout:
#
#     OUT=/some/folder bash benchmarks/results/gpu/run.sh
#
# Needs .gpu/smollm2_tokenizer (the embedded tokenizer, saved as benchmarks/save_random_model.py
# says) for the end-to-end part. Every part has its own time limit; results are packed into
# $OUT/results.tgz after each part, so a run stopped part-way keeps what it measured.
source benchmarks/results/gpu/parts.sh

# 1. Exactness on CUDA (float32, TF32 off): token for token against the slow reference.
part exactness_cuda 130 env PMI_DECODE_TEST_DEVICE=cuda python3 -m pytest -m exactness -q -p no:cacheprovider $XDIST tests

SPEED="python3 benchmarks/decode_speed.py --device cuda --new-tokens 64 --repeats 3 --output-dir $R"
# 2. Llama shaped like SmolLM2-1.7B, bfloat16, Topical-Chat lengths (~570 prompt tokens).
part llama_570 140 $SPEED --models llama-1.7b --dtype bfloat16 --datasets topicalchat --modes greedy beam \
    --batch-sizes 1 8 16 --methods default separate cfg --name llama_570
# 3. Document lengths 0.5k to 4k tokens, beam 4, batch 8.
part llama_doclen 110 $SPEED --models llama-1.7b --dtype bfloat16 --datasets topicalchat --modes beam \
    --batch-sizes 8 --doc-tokens 512 1024 2048 4096 --methods default separate --name llama_doclen
# 4. BART-base, float32, greedy and beam at batch 1 and 16.
part bart_base 45 $SPEED --models bart-base --dtype float32 --datasets topicalchat --modes greedy beam \
    --batch-sizes 1 16 --methods default separate --name bart_base
# 5. Sampling and beam sampling (the separate path with deferral today).
part llama_sampling 45 $SPEED --models llama-1.7b --dtype bfloat16 --datasets topicalchat \
    --modes sampling beam_sampling --batch-sizes 8 --methods default separate --name llama_sampling
# 6. End to end: pmi-decode generate on 100 Topical-Chat dialogues, a random SmolLM2-135M-sized model.
part save_model 20 python3 benchmarks/save_random_model.py --model smollm2-135m --tokenizer .gpu/smollm2_tokenizer \
    --output /tmp/rand135 --dtype bfloat16 --device cuda
part cli_e2e 70 python3 benchmarks/cli_throughput.py --input benchmarks/fixtures/topicalchat_valid_rare_100.jsonl \
    --dialogues 100 --parts lengths end_to_end --repeats 1 --model /tmp/rand135 --device cuda --dtype bfloat16 \
    --cli-defaults --output-dir "$R/cli_e2e"
cat "$R/parts.txt"
