#!/usr/bin/env bash
# Pass 11, one command (about nine and a half minutes; the parts' limits add up to 560 s):
# 1. the shared positions' and the cross-attention cache's tests on CUDA, then the whole exactness
#    suite (now with the 21 model families and those two modules), all with the packed path's cache
#    buffered, its beams sharing their prompt positions and the encoder-decoder beams holding the
#    cross-attention once per prompt (conftest's DEVICE_SWITCHES);
# 2. shared positions against per-row prompts, time and peak memory in one process: the Llama shape
#    (SmolLM2-1.7B, bfloat16) beam 4 at batch 8 at the 0.5k-token document (1.26x plain's memory in
#    passes 5 and 8), then beam 4 at batch 1 and 8 at ~570 prompt tokens;
# 3. BART-base beam 4 at batch 16 with and without the cross-attention held once per prompt.
#
#     OUT=/some/folder bash benchmarks/results/gpu/pass11/run.sh
source benchmarks/results/gpu/parts.sh
export PMI_DECODE_TEST_DEVICE=cuda PMI_DECODE_TEST_BUFFERED_CACHE=1 PMI_DECODE_TEST_SHARED_POSITIONS=1 \
    PMI_DECODE_TEST_CROSS_ATTENTION_ONCE=1
part unit_tests 60 python3 -m pytest -q -p no:cacheprovider -n 4 tests/test_shared_positions.py \
    tests/test_cross_attention_cache.py
part exactness 200 python3 -m pytest -m exactness -q -p no:cacheprovider -n 12 tests
unset PMI_DECODE_TEST_BUFFERED_CACHE PMI_DECODE_TEST_SHARED_POSITIONS PMI_DECODE_TEST_CROSS_ATTENTION_ONCE
export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True  # as passes 5 and 8 measured the 0.5k row
AB="python3 benchmarks/switch_ab.py --device cuda --new-tokens 64 --output-dir $R/switch_ab"
LLAMA="--model llama-1.7b --dtype bfloat16 --beams 4 --switch shared-positions"
part shared_llama_doc512 110 $AB $LLAMA --repeats 2 --batch 8 --doc-tokens 512
part shared_llama_570_b1 50 $AB $LLAMA --repeats 5 --batch 1
part shared_llama_570_b8 70 $AB $LLAMA --repeats 2 --batch 8
unset PYTORCH_CUDA_ALLOC_CONF
part once_bart_beam_b16 70 $AB --switch cross-attention-once --repeats 5 --batch 16 --model bart-base \
    --dtype float32 --beams 4
cat "$R/parts.txt"
