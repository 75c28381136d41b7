#!/usr/bin/env bash
# Where the packed path's time goes (the diagnosis run's profiles outran their limits): plain and
# packed only, greedy batch 1 and beam 4 batch 16, tables by device time and by host time.
#
#     OUT=/some/folder bash benchmarks/results/gpu/profile_run.sh
source benchmarks/results/gpu/parts.sh
PROFILE="python3 benchmarks/profile_packed.py --device cuda --paths plain packed --rows 30"
part profile_packed_greedy_b1 70 $PROFILE --batch 1 --mode greedy --output-dir "$R/profile"
part profile_packed_beam_b16 90 $PROFILE --batch 16 --mode beam --output-dir "$R/profile"
cat "$R/parts.txt"
