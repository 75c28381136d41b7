"""Which committed responses a detector of an earlier commit judges differently from the detector
now (every distinct plain_response / pmi_response under docs/results/correctness/, judged against
its own record's document and history).

    python docs/results/correctness/issue24/detector_recount.py abstains 7cd0d53 \
        > docs/results/correctness/issue24/abstain_recount.json
    python docs/results/correctness/issue24/detector_recount.py wrong_facts 38a7e96 \
        > docs/results/correctness/issue24/wrong_fact_recount.json   # and cfa0108 > ..._cfa0108.json

``abstains`` is :func:`pmi_decode.metrics.correctness.abstains` (a verdict per text and question,
for the rules that read the question: since 9d1f873);
``wrong_facts`` is :func:`pmi_decode.metrics.fact_support.wrong_facts` (the verdict is whether it
finds a wrong number, and whether it finds a wrong name).
"""
import argparse
import glob
import importlib
import inspect
import json
import subprocess
import types
from pathlib import Path

ROOT = Path(__file__).parents[4]
MODULES = {"abstains": "correctness", "wrong_facts": "fact_support"}


def module_at(commit: str, name: str) -> types.ModuleType:
    """``pmi_decode.metrics.<name>`` as it was at ``commit`` (its relative imports resolve to
    the package as it is now)."""
    source = subprocess.run(["git", "show", f"{commit}:pmi_decode/metrics/{name}.py"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout
    module = types.ModuleType(f"{name}_before")
    module.__package__ = "pmi_decode.metrics"
    exec(compile(source, f"{name}_before", "exec"), module.__dict__)
    return module


def verdict(module, detector: str, record: dict, text: str):
    if detector == "abstains":
        history = record.get("history") or []
        if history and "question" in inspect.signature(module.abstains).parameters:  # the rules since 9d1f873
            return module.abstains(text, history[-1])
        return module.abstains(text)
    wrong = module.wrong_facts(record.get("document", ""), record.get("history") or [], text)
    return {"wrong_number": any(u["numeric"] for u in wrong), "wrong_name": any(not u["numeric"] for u in wrong)}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("detector", choices=list(MODULES))
    parser.add_argument("commit", help="the commit whose detector is compared with the one now")
    args = parser.parse_args()
    name = MODULES[args.detector]
    before, now = module_at(args.commit, name), importlib.import_module(f"pmi_decode.metrics.{name}")
    seen, changed = set(), []
    for path in sorted(glob.glob(str(ROOT / "docs/results/correctness/**/*.jsonl"), recursive=True)):
        for line in open(path):
            record = json.loads(line)
            for key in ("plain_response", "pmi_response"):
                text = record.get(key)
                if not isinstance(text, str):
                    continue
                # abstention reads the text and the question; a wrong fact depends on the document too
                identity = (text, str(record.get("history"))) if args.detector == "abstains" else (
                    text, record.get("document"), str(record.get("history")))
                if identity in seen:
                    continue
                seen.add(identity)
                old, new = verdict(before, args.detector, record, text), verdict(now, args.detector, record, text)
                if old != new:
                    changed.append({"file": str(Path(path).relative_to(ROOT)), "id": record.get("id"), "field": key,
                                    "answerable": record.get("answerable"), f"{args.detector}_before": old,
                                    f"{args.detector}_now": new, "response": text})
    print(json.dumps({"rules_before": args.commit, "distinct_responses": len(seen), "changed": changed}, indent=1))


if __name__ == "__main__":
    main()
