#!/usr/bin/env bash
# The next GPU pass, first command (not run yet; about nine minutes), after pass 10 turned the step
# graph on for CUDA and the packed path's buffered cache came on for the CPU:
# 1. the step graph, final choice and packed path tests on CUDA (the refusal test's scores now made
#    on the sequences' device; the recording keeps torch's prototype warning from the user), with
#    the packed path's cache buffered (pmi_decode.packed.buffered_update; conftest's
#    PMI_DECODE_TEST_BUFFERED_CACHE=1), then the whole exactness suite so;
# 2. the Llama shape (SmolLM2-1.7B, bfloat16) at ~570 prompt tokens with every default on, greedy and
#    beam 4 at batch 1 and 8, to see that the graph costs the main rows nothing (passes 5-8 on
#    an H100: 1.01 / 1.04 greedy, 1.06 / 1.14 beam; rerun plain beside, as always);
# 3. the buffered cache against torch.cat's, time and peak memory in one process: the Llama shape's
#    beam 4 at batch 8 at the 0.5k-token document (1.26x plain's memory in passes 5 and 8, target
#    1.25x; the buffer's unused room can add up to 3% + 32 positions, no whole-cache copy a step)
#    and GPT-2 small greedy at batch 1 (two kernels a layer fewer).
# The second command is next_run2.sh. Sizes from pass 10 (a switch_ab case 20-30 s, the exactness
# suite about 100 s with 12 workers, more with the 121 model-family tests since) and pass 5 (the
# Llama grid about 60 s per mode at two repeats); the parts' limits add up to 560 s (timeout_s 590):
#
#     OUT=/some/folder bash benchmarks/results/gpu/next_run.sh
source benchmarks/results/gpu/parts.sh
export PMI_DECODE_TEST_DEVICE=cuda
part unit_tests 90 env PMI_DECODE_TEST_BUFFERED_CACHE=1 python3 -m pytest -q -p no:cacheprovider -n 4 \
    tests/test_step_graph.py tests/test_final_choice.py tests/test_packed_path.py
part exactness_buffered 170 env PMI_DECODE_TEST_BUFFERED_CACHE=1 python3 -m pytest -m exactness -q \
    -p no:cacheprovider -n 12 tests
part llama_570 150 python3 benchmarks/decode_speed.py --device cuda --new-tokens 64 --output-dir $R --repeats 2 \
    --models llama-1.7b --dtype bfloat16 --datasets topicalchat --modes greedy beam --batch-sizes 1 8 \
    --methods default --name llama_570
export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True  # as passes 5 and 8 measured the 0.5k row
AB="python3 benchmarks/switch_ab.py --switch buffered-cache --device cuda --new-tokens 64 --output-dir $R/switch_ab"
part buffered_llama_doc512 110 $AB --repeats 2 --batch 8 --model llama-1.7b --dtype bfloat16 --beams 4 --doc-tokens 512
part buffered_gpt2_greedy 40 $AB --repeats 7 --batch 1 --model gpt2-small --dtype float32 --beams 1
cat "$R/parts.txt"
