#!/usr/bin/env bash
# The next GPU pass, second command (not run yet; about eight minutes), on the same machine:
# 1. the Llama shape (SmolLM2-1.7B, bfloat16) at ~570 prompt tokens with every default on, greedy and
#    beam 4 at batch 1 and 8, to see that the step graph costs the main rows nothing (passes
#    5-8 on an H100: 1.01 / 1.04 greedy, 1.06 / 1.14 beam; plain rerun beside, as always);
# 2. the step graph against the eager step at the Llama shape's greedy batch 1;
# 3. whether step_graph.MAX_ELEMENTS (2M scores) should move: a recorded step keeps its
#    intermediates in the graph's own pool for the call, and the Llama shape's beam 4 at batch 8
#    (3.1M scores: 32 rows x 49,152, both halves) stays eager under it. At the 0.5k-token document:
#    graph against eager, time and peak memory in one process (--switch step-graph-large);
# 4. BART-base beam 4 at batch 16 with and without the final choice's record, five repeats (the
#    cross-attention held once per prompt, on for CUDA since pass 11, took it to 1.03x plain);
# 5. GPT-2 small: the buffered cache at greedy batch 1 (two kernels a layer fewer), and its packed
#    beam 4 step at batch 1 profiled (1.29x plain in pass 10, where the graph gained nothing).
#
#     OUT=/some/folder bash benchmarks/results/gpu/next_run2.sh
source benchmarks/results/gpu/parts.sh
part llama_570 150 python3 benchmarks/decode_speed.py --device cuda --new-tokens 64 --output-dir $R --repeats 2 \
    --models llama-1.7b --dtype bfloat16 --datasets topicalchat --modes greedy beam --batch-sizes 1 8 \
    --methods default --name llama_570
AB="python3 benchmarks/switch_ab.py --device cuda --new-tokens 64 --output-dir $R/switch_ab"
part graph_llama_greedy 60 $AB --switch step-graph --repeats 5 --batch 1 --model llama-1.7b --dtype bfloat16 --beams 1
export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
part graph_llama_doc512 110 $AB --switch step-graph-large --repeats 2 --batch 8 --model llama-1.7b --dtype bfloat16 \
    --beams 4 --doc-tokens 512
unset PYTORCH_CUDA_ALLOC_CONF
part record_bart_beam_b16 80 $AB --switch final-choice --repeats 5 --batch 16 --model bart-base --dtype float32 --beams 4
part buffered_gpt2_greedy 40 $AB --switch buffered-cache --repeats 7 --batch 1 --model gpt2-small --dtype float32 \
    --beams 1
part gpt2_beam_profile 60 python3 benchmarks/profile_packed.py --device cuda --model gpt2-small --dtype float32 \
    --mode beam --batch 1 --new-tokens 16 --paths plain default --sync-debug --output-dir "$R/gpt2_beam_profile"
cat "$R/parts.txt"
