"""What the model's final choice costs: the command's decoding with ``final_choice="model"`` (the
default) against ``"pmi"`` (beam search's own pick) and plain decoding, same dialogues, same run.

    python benchmarks/final_choice_cost.py --output benchmarks/results/cpu_speed/final_choice/cost.json

Each repeat decodes the same dialogues three ways in rotating order (``decode_records`` with the
command's defaults; plain is ``--alpha 0 --p 1``, which takes the same path with no document-free
half and no rescoring); the median of the repeats is reported, with the ratios
``model_over_pmi`` (what the rescoring adds) and ``model_over_plain``. The machine may be busy:
read the ratios, not the seconds. The responses of ``model`` and ``pmi`` are compared too
(``responses_changed``), so a run also says how often the choice differs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

from pmi_decode.batch.decode import decode_records
from pmi_decode.decode_config import DecodeConfig
from pmi_decode.models import load_model_and_tokenizer

DEFAULT_INPUT = Path(__file__).resolve().parents[1] / "docs/results/correctness/generations/topicalchat40.jsonl"


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="embedded")
    parser.add_argument("--input", default=str(DEFAULT_INPUT), help="dialogue records (JSON lines)")
    parser.add_argument("--dialogues", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--num-beams", type=int, default=4)
    parser.add_argument("--max-input-length", type=int, default=320)
    parser.add_argument("--device", default=None, help="e.g. cuda; default: where the model loads")
    parser.add_argument("--output", required=True)
    args = parser.parse_args(argv)

    records = [json.loads(line) for line in open(args.input)][: args.dialogues]
    model, tokenizer = load_model_and_tokenizer(args.model)
    if args.device:
        model.to(args.device)
    base = DecodeConfig.cli_defaults().replace(num_beams=args.num_beams, max_length=args.max_input_length,
                                               batch_size=len(records), max_history_turns=3)
    configs = {"model": base.replace(final_choice="model"), "pmi": base.replace(final_choice="pmi"),
               "plain": base.replace(alpha=0.0, p=1.0)}
    times = {name: [] for name in configs}
    responses = {}
    names = list(configs)
    for repeat in range(args.repeats):
        for name in names[repeat % len(names):] + names[:repeat % len(names)]:
            if torch.cuda.is_available() and args.device and args.device.startswith("cuda"):
                torch.cuda.synchronize()
            start = time.perf_counter()
            out = list(decode_records(records, model, tokenizer, configs[name], progress=False))
            if torch.cuda.is_available() and args.device and args.device.startswith("cuda"):
                torch.cuda.synchronize()
            times[name].append(time.perf_counter() - start)
            responses[name] = {r["id"]: r["pmi_response"] for r in out}
        print(f"repeat {repeat + 1}: " + ", ".join(f"{n} {times[n][-1]:.1f}s" for n in names), flush=True)
    median = {name: statistics.median(values) for name, values in times.items()}
    result = {
        "model": args.model, "dialogues": len(records), "num_beams": args.num_beams, "repeats": args.repeats,
        "seconds": times, "median_seconds": median,
        "model_over_pmi": median["model"] / median["pmi"], "model_over_plain": median["model"] / median["plain"],
        "pmi_over_plain": median["pmi"] / median["plain"],
        "responses_changed": sum(responses["model"][i] != responses["pmi"][i] for i in responses["model"]),
        "command": "python benchmarks/final_choice_cost.py " + " ".join(sys.argv[1:] if argv is None else argv),
    }
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: result[k] for k in ("median_seconds", "model_over_pmi", "model_over_plain",
                                              "pmi_over_plain", "responses_changed")}, indent=2))
    return result


if __name__ == "__main__":
    main()
