#!/usr/bin/env bash
# Deliberate mutation: in scratch copies of HEAD, remove the nucleus mask (nucleus_mask keeps every
# finite token) and run the reference comparisons, with the peaked tiny models the tests use and
# with unscaled ones (the models the tests used before). Writes nucleus_mutation.json beside this file.
# Usage: bash docs/results/processor/nucleus_mutation.sh [PYTHON]
set -u
SRC=$(cd "$(dirname "$0")/../../.." && pwd)
PY=${1:-$SRC/.venv/bin/python}
LOG=$(mktemp)
TESTS="tests/test_processor.py::test_equals_slow_reference tests/test_processor.py::test_equals_slow_reference_other_families tests/test_processor.py::test_alpha_zero_with_p_below_one_goes_through_the_nucleus"
run() {  # label, peaked (yes/no), mask (yes/no)
  d=$(mktemp -d); git -C "$SRC" archive HEAD | tar -x -C "$d"
  if [ "$3" = no ]; then
    sed -i 's/^    if p >= 1.0:$/    if True:  # MUTATION: nucleus mask removed/' "$d/pmi_decode/processor.py"
    grep -q "MUTATION" "$d/pmi_decode/processor.py" || { echo "mutation not applied"; exit 1; }
  fi
  if [ "$2" = no ]; then
    sed -i 's/^PEAKED = .*/PEAKED = {"bart": 1.0, "llama": 1.0, "gpt2": 1.0, "t5": 1.0, "bloom": 1.0}/' "$d/pmi_decode/testing.py"
  fi
  (cd "$d" && PYTHONPATH="$d" OMP_NUM_THREADS=1 "$PY" -m pytest -q -p no:cacheprovider $TESTS 2>&1 | tail -1) | sed "s/^/$1: /"
  rm -rf "$d"
}
{
  run "mask kept, peaked models" yes yes
  run "mask removed, peaked models" yes no
  run "mask removed, unscaled models (before)" no no
} | tee "$LOG"
"$PY" - "$LOG" "$(dirname "$0")/nucleus_mutation.json" <<'PY'
import json, re, sys
rows = []
for line in open(sys.argv[1]):
    label, result = line.rstrip("\n").split(": ", 1)
    counts = {k: int(m.group(1)) if (m := re.search(rf"(\d+) {k}", result)) else 0 for k in ("failed", "passed")}
    rows.append({"variant": label, **counts, "pytest": result})
json.dump({"tests": "test_equals_slow_reference, test_equals_slow_reference_other_families, "
                    "test_alpha_zero_with_p_below_one_goes_through_the_nucleus",
           "command": "bash docs/results/processor/nucleus_mutation.sh", "results": rows},
          open(sys.argv[2], "w"), indent=2)
PY
rm -f "$LOG"
