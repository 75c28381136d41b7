#!/usr/bin/env bash
# The sixth GPU pass, sized from the fifth (an H100) to fit one command of under ten minutes:
#
#     OUT=/some/folder bash benchmarks/results/gpu/next_run.sh      (the CLI part needs the folder .gpu beside the code)
#
# Since the fifth pass the packed path is pmi_generate's default on decoder-only models ("default"
# below); "paired" / "paired-prompt-once" are the paired path. Parts: the exactness tests on CUDA
# with that default; beam 4 and sampling at batch 16 (Llama-1.7B shape, bfloat16, ~570 prompt
# tokens); the default path alone at 2k and 4k-token documents (the paired path ran out of memory at
# 2k on an H100); a model with shared key/value heads (SmolLM2-135M shape), where the packed step
# dispatches 1.36x plain's operators against the paired path's 1.10x (benchmarks/results/cpu_speed/
# op_counts/); BART-base, which stays on the paired path; the command end to end with two repeats
# and the response lengths. Times on the H100: exactness ~100 s with 6 workers, a Llama case with
# three methods 10-30 s, model set-up ~20 s, the CLI's plain run on 40 dialogues ~20 s.
source benchmarks/results/gpu/parts.sh
export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True  # the long documents fragment the allocator
SPEED="python3 benchmarks/decode_speed.py --device cuda --new-tokens 64 --repeats 2 --output-dir $R"
part exactness_cuda 100 env PMI_DECODE_TEST_DEVICE=cuda python3 -m pytest -m exactness -q -p no:cacheprovider $XDIST tests
part llama_b16 110 $SPEED --models llama-1.7b --dtype bfloat16 --datasets topicalchat --modes beam sampling \
    --batch-sizes 16 --methods default paired paired-prompt-once --name llama_b16
part llama_doclen_long 110 $SPEED --models llama-1.7b --dtype bfloat16 --datasets topicalchat --modes beam \
    --batch-sizes 8 --doc-tokens 2048 4096 --methods default --name llama_doclen_long
part smollm2_gqa 60 $SPEED --models smollm2-135m --dtype bfloat16 --datasets topicalchat --modes greedy beam \
    --batch-sizes 1 8 --methods default paired paired-prompt-once --name smollm2_gqa
part bart_base 60 $SPEED --models bart-base --dtype float32 --datasets topicalchat --modes greedy beam \
    --batch-sizes 1 16 --methods default --name bart_base
part save_model 20 python3 benchmarks/save_random_model.py --model smollm2-135m --tokenizer .gpu/smollm2_tokenizer \
    --output /tmp/rand135 --dtype bfloat16 --device cuda
part cli_e2e 100 python3 benchmarks/cli_throughput.py --input benchmarks/fixtures/topicalchat_valid_rare_100.jsonl \
    --dialogues 30 --parts end_to_end --repeats 2 --model /tmp/rand135 --device cuda --dtype bfloat16 \
    --cli-defaults --also-packed --output-dir "$R/cli_e2e"
cat "$R/parts.txt"
