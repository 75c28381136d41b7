#!/usr/bin/env bash
# The next GPU pass (not run yet), after pass 10 turned the step graph on for CUDA:
# 1. the step graph and final choice tests on CUDA (the refusal test's scores now made on the
#    sequences' device; the recording keeps torch's prototype warning from the user);
# 2. the Llama shape (SmolLM2-1.7B, bfloat16) at ~570 prompt tokens with every default on, greedy and
#    beam 4 at batch 1 and 8, to see that the graph costs the main rows nothing (passes 5-8 on
#    an H100: 1.01 / 1.04 greedy, 1.06 / 1.14 beam; rerun plain beside, as always), and the graph
#    against the eager step in one process at greedy batch 1;
# 3. whether step_graph.MAX_ELEMENTS (2M scores) should move: a recorded step keeps its
#    intermediates in the graph's own pool for the call, and the Llama shape's beam 4 at batch 8
#    (3.1M scores: 32 rows x 49,152, both halves) stays eager under it. At the 0.5k-token document
#    (1.26x plain's memory in passes 5 and 8, target 1.25x): graph against eager, time and peak
#    memory in one process (--switch step-graph-large);
# 4. BART-base beam 4 at batch 16, 1.28x plain in pass 10's three repeats against 1.10x in pass 8
#    (an H100): again with five repeats, with and without the final choice's record;
# 5. GPT-2 small's packed beam 4 step at batch 1 profiled (1.29x plain in pass 10, where the graph
#    gained nothing): where its added time goes, by operator and by host wait.
# Sized for one command of about eight minutes (pass 10's parts: a switch_ab case 20-30 s; pass 5's
# Llama grid about 60 s per mode at two repeats):
#
#     OUT=/some/folder bash benchmarks/results/gpu/next_run.sh
source benchmarks/results/gpu/parts.sh
part graph_record_tests 90 env PMI_DECODE_TEST_DEVICE=cuda python3 -m pytest -q -p no:cacheprovider -n 4 \
    tests/test_step_graph.py tests/test_final_choice.py
part llama_570 150 python3 benchmarks/decode_speed.py --device cuda --new-tokens 64 --output-dir $R --repeats 2 \
    --models llama-1.7b --dtype bfloat16 --datasets topicalchat --modes greedy beam --batch-sizes 1 8 \
    --methods default --name llama_570
part graph_llama_greedy 60 python3 benchmarks/switch_ab.py --switch step-graph --device cuda --new-tokens 64 \
    --repeats 5 --batch 1 --model llama-1.7b --dtype bfloat16 --beams 1 --output-dir "$R/switch_ab"
export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True  # as passes 5 and 8 measured the 0.5k row
part graph_llama_doc512 120 python3 benchmarks/switch_ab.py --switch step-graph-large --device cuda --new-tokens 64 \
    --repeats 2 --batch 8 --model llama-1.7b --dtype bfloat16 --beams 4 --doc-tokens 512 --output-dir "$R/switch_ab"
part record_bart_beam_b16 80 python3 benchmarks/switch_ab.py --switch final-choice --device cuda --new-tokens 64 \
    --repeats 5 --batch 16 --model bart-base --dtype float32 --beams 4 --output-dir "$R/switch_ab"
part gpt2_beam_profile 60 python3 benchmarks/profile_packed.py --device cuda --model gpt2-small --dtype float32 \
    --mode beam --batch 1 --new-tokens 16 --paths plain default --sync-debug --output-dir "$R/gpt2_beam_profile"
cat "$R/parts.txt"
