"""Which committed responses the abstention rule of a commit judges differently from the rule now
(every distinct plain_response / pmi_response under docs/results/correctness/).

    python docs/results/correctness/issue24/abstain_recount.py 7cd0d53 > docs/results/correctness/issue24/abstain_recount.json
"""
import glob
import json
import subprocess
import sys
import types
from pathlib import Path

from pmi_decode.metrics import correctness as now

ROOT = Path(__file__).parents[4]
source = subprocess.run(["git", "show", f"{sys.argv[1]}:pmi_decode/metrics/correctness.py"], cwd=ROOT,
                        capture_output=True, text=True, check=True).stdout
before = types.ModuleType("correctness_before")
before.__package__ = "pmi_decode.metrics"
exec(compile(source, "correctness_before", "exec"), before.__dict__)

seen, changed = set(), []
for path in sorted(glob.glob(str(ROOT / "docs/results/correctness/**/*.jsonl"), recursive=True)):
    for line in open(path):
        record = json.loads(line)
        for key in ("plain_response", "pmi_response"):
            text = record.get(key)
            if not isinstance(text, str) or text in seen:
                continue
            seen.add(text)
            if before.abstains(text) != now.abstains(text):
                changed.append({"file": str(Path(path).relative_to(ROOT)), "id": record.get("id"), "field": key,
                                "answerable": record.get("answerable"), "abstains_before": before.abstains(text),
                                "abstains_now": now.abstains(text), "response": text})
print(json.dumps({"rules_before": sys.argv[1], "distinct_responses": len(seen), "changed": changed}, indent=1))
