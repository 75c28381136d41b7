#!/usr/bin/env bash
# The next GPU pass, first command (not run yet; about nine minutes). What it settles first: the
# packed path's beams sharing their prompt positions (pmi_decode.shared_positions, on for the CPU
# only), which would take the 0.5k-token row's memory (1.26x plain in passes 5 and 8, target 1.25x)
# well under the target: the prompt part of the cache held once per prompt instead of once per beam.
# 1. the step graph, final choice, packed path and shared-positions tests on CUDA, with the packed
#    path's cache buffered, its beams sharing their prompt, and BART's beams holding the
#    cross-attention once per prompt (conftest's PMI_DECODE_TEST_BUFFERED_CACHE=1,
#    PMI_DECODE_TEST_SHARED_POSITIONS=1 and PMI_DECODE_TEST_CROSS_ATTENTION_ONCE=1), then the whole
#    exactness suite so;
# 2. shared positions against per-row prompts, time and peak memory in one process: the Llama shape
#    (SmolLM2-1.7B, bfloat16) beam 4 at batch 8 at the 0.5k-token document, then beam 4 at batch 1
#    and 8 at ~570 prompt tokens (the two-part attention runs a few more kernels a layer than one
#    sdpa call: does the latency-bound batch 1 pay for it?);
# 3. the buffered cache against torch.cat's at the 0.5k-token row, time and peak memory.
# The second command is next_run2.sh. Sizes from pass 10 (a switch_ab case 20-30 s, the exactness
# suite about 100 s with 12 workers, more with the model-family tests since) and pass 5 (the Llama
# rows about 60 s per mode at two repeats); the parts' limits add up to 570 s (timeout_s 595):
#
#     OUT=/some/folder bash benchmarks/results/gpu/next_run.sh
source benchmarks/results/gpu/parts.sh
export PMI_DECODE_TEST_DEVICE=cuda PMI_DECODE_TEST_BUFFERED_CACHE=1 PMI_DECODE_TEST_SHARED_POSITIONS=1 \
    PMI_DECODE_TEST_CROSS_ATTENTION_ONCE=1
part unit_tests 90 python3 -m pytest -q -p no:cacheprovider -n 4 tests/test_step_graph.py \
    tests/test_final_choice.py tests/test_packed_path.py tests/test_shared_positions.py tests/test_cross_attention_cache.py
part exactness 170 python3 -m pytest -m exactness -q -p no:cacheprovider -n 12 tests
unset PMI_DECODE_TEST_BUFFERED_CACHE PMI_DECODE_TEST_SHARED_POSITIONS PMI_DECODE_TEST_CROSS_ATTENTION_ONCE
export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True  # as passes 5 and 8 measured the 0.5k row
AB="python3 benchmarks/switch_ab.py --device cuda --new-tokens 64 --output-dir $R/switch_ab --model llama-1.7b \
    --dtype bfloat16 --beams 4"
part shared_llama_doc512 110 $AB --switch shared-positions --repeats 2 --batch 8 --doc-tokens 512
part shared_llama_570_b1 50 $AB --switch shared-positions --repeats 5 --batch 1
part shared_llama_570_b8 70 $AB --switch shared-positions --repeats 2 --batch 8
part buffered_llama_doc512 80 $AB --switch buffered-cache --repeats 2 --batch 8 --doc-tokens 512
cat "$R/parts.txt"
