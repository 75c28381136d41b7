#!/usr/bin/env bash
# Diagnosis before the fourth speed pass, in one command of about 5 minutes:
#
#     OUT=/some/folder bash benchmarks/results/gpu/diag_run.sh
#
# Where the packed path's beam-search time goes at 64 rows (the profile table the third pass lost
# to its time limit, grouped by input shape too, and the host waits per step by source line), the
# same for greedy search at batch 1 (the latency-bound case the default path misses by 0.09x), and
# the exactness tests on CUDA (the grouped-query step and the one-sort nucleus never ran there).
source benchmarks/results/gpu/parts.sh
PROFILE="python3 benchmarks/profile_packed.py --device cuda --sync-debug --by-shape --rows 30"
part profile_beam_b16 170 $PROFILE --batch 16 --mode beam --output-dir "$R/profile"
part profile_greedy_b1 80 $PROFILE --batch 1 --mode greedy --output-dir "$R/profile"
part exactness_cuda 120 env PMI_DECODE_TEST_DEVICE=cuda python3 -m pytest -m exactness -q -p no:cacheprovider $XDIST tests
cat "$R/parts.txt"
