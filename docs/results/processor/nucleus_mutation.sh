#!/usr/bin/env bash
# Scratch copies of the repository: nucleus mask removed, with peaked and with unscaled tiny models.
set -u
SRC=/work/wt/safety; OUT=$SRC/docs/results/processor/nucleus_mutation.json
TESTS="tests/test_processor.py::test_equals_slow_reference tests/test_processor.py::test_equals_slow_reference_other_families tests/test_processor.py::test_alpha_zero_with_p_below_one_goes_through_the_nucleus"
run() {  # name, peaked(yes/no), mask(yes/no)
  d=$(mktemp -d); git -C $SRC archive HEAD | tar -x -C $d
  if [ "$3" = no ]; then
    python3 - "$d/pmi_decode/processor.py" <<'PY'
import sys; p=sys.argv[1]; s=open(p).read()
s=s.replace('    finite = torch.isfinite(log_probs)\n    if p >= 1.0:', '    finite = torch.isfinite(log_probs)\n    if True:  # MUTATION: nucleus mask removed', 1)
open(p,"w").write(s)
PY
  fi
  if [ "$2" = no ]; then sed -i 's/^PEAKED = .*/PEAKED = {"bart": 1.0, "llama": 1.0, "gpt2": 1.0, "t5": 1.0, "bloom": 1.0}/' $d/tests/tiny_models.py; fi
  (cd $d && PYTHONPATH=$d OMP_NUM_THREADS=1 /work/main/.venv/bin/python -m pytest -q -p no:cacheprovider $TESTS 2>&1 | tail -1) | sed "s/^/$1: /"
  rm -rf $d
}
{
run "mask kept, peaked models" yes yes
run "mask removed, peaked models" yes no
run "mask removed, unscaled models (before)" no no
} | tee /tmp/mutation.txt
python3 - <<'PY'
import json,re
rows=[]
for line in open("/tmp/mutation.txt"):
    name,res=line.split(": ",1)
    f=re.search(r"(\d+) failed",res); p=re.search(r"(\d+) passed",res)
    rows.append({"variant":name,"failed":int(f.group(1)) if f else 0,"passed":int(p.group(1)) if p else 0,"pytest":res.strip()})
json.dump({"tests":"test_equals_slow_reference, test_equals_slow_reference_other_families, test_alpha_zero_with_p_below_one_goes_through_the_nucleus","command":"bash docs/results/processor/nucleus_mutation.sh","results":rows},open("/work/wt/safety/docs/results/processor/nucleus_mutation.json","w"),indent=2)
PY
