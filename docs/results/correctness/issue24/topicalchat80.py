"""The 80 Topical-Chat valid_rare turns of the 120-turn comparison (configs/compare_topicalchat_120_64.yaml)
that generations/topicalchat40.jsonl (its every third turn, from the first) leaves out.

    python docs/results/correctness/issue24/topicalchat80.py ../shared/data/topicalchat \
        > docs/results/correctness/generations/topicalchat80.jsonl
"""
import json
import sys
from pathlib import Path

import yaml

from pmi_decode.experiments.compare import _inputs

ROOT = Path(__file__).parents[4]
config = yaml.safe_load((ROOT / "configs" / "compare_topicalchat_120_64.yaml").read_text())
config["data_dir"] = sys.argv[1]
turns = _inputs(config)
forty = [json.loads(line)["id"] for line in (ROOT / "docs/results/correctness/generations/topicalchat40.jsonl").open()]
if [t["id"] for t in turns[0::3]] != forty:
    raise SystemExit("error: topicalchat40.jsonl is not every third turn of the comparison's 120")
for turn in turns:
    if turn["id"] not in forty:
        print(json.dumps(turn))
