#!/usr/bin/env bash
# Pass 11, the three commands that followed run.sh on the same warm machine (about four minutes in
# all): the GPT-J test that failed, with its traceback; the Llama shape's beam 4 at batch 1 again
# (run.sh's 50 s limit cut it); the buffered cache at the 0.5k-token row; beam 4 at batch 16 and the
# 1k-token document with shared positions; BART-base at batch 1 and BART-large at batch 16 with the
# cross-attention held once per prompt.
#
#     OUT=/some/folder bash benchmarks/results/gpu/pass11/run2.sh
source benchmarks/results/gpu/parts.sh
export PMI_DECODE_TEST_DEVICE=cuda PMI_DECODE_TEST_SHARED_POSITIONS=1
part gptj 40 python3 -m pytest -q -p no:cacheprovider -x \
    "tests/test_shared_positions.py::test_families_share_the_prompt_where_their_attention_allows[gptj]"
unset PMI_DECODE_TEST_SHARED_POSITIONS
AB="python3 benchmarks/switch_ab.py --device cuda --new-tokens 64 --output-dir $R/switch_ab"
LLAMA="--model llama-1.7b --dtype bfloat16 --beams 4"
part shared_llama_570_b1 130 $AB $LLAMA --switch shared-positions --repeats 3 --batch 1
export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
part buffered_llama_doc512 90 $AB $LLAMA --switch buffered-cache --repeats 2 --batch 8 --doc-tokens 512
part shared_llama_570_b16 80 $AB $LLAMA --switch shared-positions --repeats 2 --batch 16
part shared_llama_doc1024 90 $AB $LLAMA --switch shared-positions --repeats 2 --batch 8 --doc-tokens 1024
unset PYTORCH_CUDA_ALLOC_CONF
ONCE="$AB --switch cross-attention-once --beams 4"
part once_bart_beam_b1 55 $ONCE --repeats 5 --batch 1 --model bart-base --dtype float32
part once_bartlarge_beam_b16 70 $ONCE --repeats 3 --batch 16 --model bart-large --dtype bfloat16
cat "$R/parts.txt"
