#!/usr/bin/env bash
# The eighth GPU pass, sized from the seventh (an H100) to fit one command of under ten minutes:
#
#     OUT=/some/folder bash benchmarks/results/gpu/pass8/run.sh   (run as next_run.sh before it ran)
#
# What pass 7 left: BART-base on the paired path (1.15-1.33x plain; batch 1's repeats spread by 40%).
# Since then the paired path gives an encoder-decoder decoder its cross-attention mask as a bias built
# once per call; this times it against the per-step mask in one process (7 repeats), and profiles the
# greedy step again; and the Llama shape's memory at a 0.5k-token document (1.26x in pass 5, with the
# same allocator setting). Times on the H100: exactness ~100 s with 12 workers, BART-base set-up ~10 s,
# one switch_ab case ~15-30 s, the profile ~25 s, the 0.5k-token Llama case ~50 s.
source benchmarks/results/gpu/parts.sh
AB="python3 benchmarks/switch_ab.py --switch cross-attention-bias --model bart-base --dtype float32 --device cuda --new-tokens 64 --repeats 7"
part exactness_cuda 200 env PMI_DECODE_TEST_DEVICE=cuda python3 -m pytest -m exactness -q -p no:cacheprovider -n 12 tests
part bias_greedy_b1 60 $AB --beams 1 --batch 1 --output-dir "$R/switch_ab"
part bias_greedy_b16 60 $AB --beams 1 --batch 16 --output-dir "$R/switch_ab"
part bias_beam_b1 60 $AB --beams 4 --batch 1 --output-dir "$R/switch_ab"
part bias_beam_b16 70 $AB --beams 4 --batch 16 --output-dir "$R/switch_ab"
part bart_profile 80 python3 benchmarks/profile_packed.py --device cuda --model bart-base --dtype float32 --mode greedy \
    --batch 1 --new-tokens 16 --paths plain default --sync-debug --output-dir "$R/bart_profile"
export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
part llama_doclen_512 90 python3 benchmarks/decode_speed.py --device cuda --new-tokens 64 --output-dir $R --repeats 2 \
    --models llama-1.7b --dtype bfloat16 --datasets topicalchat --modes beam --batch-sizes 8 --doc-tokens 512 \
    --methods default --name llama_doclen_512
# beam search's default now records the hypotheses' conditional scores for the model's final choice
# (pmi_decode/final_choice.py): beam 4 batch 8 at Topical-Chat lengths, against pass 5's 1.14x
part llama_beam_b8_final_choice 90 python3 benchmarks/decode_speed.py --device cuda --new-tokens 64 --output-dir $R \
    --repeats 2 --models llama-1.7b --dtype bfloat16 --datasets topicalchat --modes beam --batch-sizes 8 \
    --methods default --name llama_beam_b8_final_choice
cat "$R/parts.txt"
