#!/usr/bin/env bash
# Bisecting the packed path's beam-search time at 64 rows (beam 4, batch 16, 32 new tokens): plain,
# default, packed, and packed with each document-free prompt cut to 8 tokens (does the extra time
# follow that half's length?), then the packed path's profile grouped by input shape.
#
#     OUT=/some/folder bash benchmarks/results/gpu/bisect_run.sh
source benchmarks/results/gpu/parts.sh
part bisect_beam_b16 185 python3 benchmarks/profile_packed.py --device cuda --batch 16 --mode beam --new-tokens 32 \
    --paths plain default packed packed-short --profile packed --by-shape --rows 25 --output-dir "$R/profile"
cp "$R"/profile/*.json "$OUT"/ 2>/dev/null
cat "$R/parts.txt"
