#!/usr/bin/env bash
# The tenth GPU pass (run on an H200, 2026-11-27): the paired and packed steps' scoring recorded as a CUDA graph
# (pmi_decode/step_graph.py), for the small models at batch 1 whose gap passes 8 and 9 found to be
# host time for the step's added kernels (BART-base 1.30 / 1.33, GPT-2 small 1.27 / 1.46, the
# SmolLM2-135M shape 1.16-1.21). Shipped off (step_graph.GRAPHED_ON = ()) until this run says:
# 1. the recorded step on real CUDA graphs gives the eager step's tokens (tests/test_step_graph.py);
# 2. graph against eager in one process, 7 repeats, plain decoding beside (benchmarks/switch_ab.py);
# 3. the packed step's additive mask (made once per step) and the final choice's record, each timed
#    against the code without it in one process;
# 4. the whole exactness suite with every paired and packed step recorded (conftest's
#    PMI_DECODE_TEST_STEP_GRAPH=1), against the slow references.
# Sized for one command of under ten minutes on an H100 (passes 8-9: a switch_ab case 15-30 s, the
# exactness suite about 100 s with 12 workers):
#
#     OUT=/some/folder bash benchmarks/results/gpu/pass10/run.sh   (run as next_run.sh)
source benchmarks/results/gpu/parts.sh
part step_graph_tests 120 env PMI_DECODE_TEST_DEVICE=cuda python3 -m pytest -q -p no:cacheprovider tests/test_step_graph.py
AB="python3 benchmarks/switch_ab.py --switch step-graph --device cuda --new-tokens 64 --repeats 7 --batch 1"
part graph_bart_greedy 60 $AB --model bart-base --dtype float32 --beams 1 --output-dir "$R/switch_ab"
part graph_bart_beam 60 $AB --model bart-base --dtype float32 --beams 4 --output-dir "$R/switch_ab"
part graph_gpt2_greedy 60 $AB --model gpt2-small --dtype float32 --beams 1 --output-dir "$R/switch_ab"
part graph_gpt2_beam 60 $AB --model gpt2-small --dtype float32 --beams 4 --output-dir "$R/switch_ab"
part graph_smollm2_greedy 60 $AB --model smollm2-135m --dtype bfloat16 --beams 1 --output-dir "$R/switch_ab"
# batch 16 greedy (32 stacked rows, under step_graph.MAX_ELEMENTS): must not be slower with the graph
part graph_bart_greedy_b16 70 python3 benchmarks/switch_ab.py --switch step-graph --device cuda --new-tokens 64 \
    --repeats 5 --batch 16 --model bart-base --dtype float32 --beams 1 --output-dir "$R/switch_ab"
# the packed step's mask made additive once per step (not converted by torch in every layer), and the
# final choice's record in beam search, each against the code without it
part mask_smollm2_greedy 60 python3 benchmarks/switch_ab.py --switch additive-mask --device cuda --new-tokens 64 \
    --repeats 7 --batch 1 --model smollm2-135m --dtype bfloat16 --beams 1 --output-dir "$R/switch_ab"
part mask_gpt2_greedy 60 python3 benchmarks/switch_ab.py --switch additive-mask --device cuda --new-tokens 64 \
    --repeats 7 --batch 1 --model gpt2-small --dtype float32 --beams 1 --output-dir "$R/switch_ab"
part record_bart_beam 60 python3 benchmarks/switch_ab.py --switch final-choice --device cuda --new-tokens 64 \
    --repeats 7 --batch 1 --model bart-base --dtype float32 --beams 4 --output-dir "$R/switch_ab"
part exactness_graphed 200 env PMI_DECODE_TEST_DEVICE=cuda PMI_DECODE_TEST_STEP_GRAPH=1 python3 -m pytest -m exactness \
    -q -p no:cacheprovider -n 12 tests
cat "$R/parts.txt"
