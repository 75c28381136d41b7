"""How large is the top-p nucleus at each decoding step: a trained model against decode_speed's
random-weight models, so that the speed benchmark's random models can be made to look like a
trained one where it matters.

Why: ``nucleus_mask`` sorts a row's whole vocabulary only when neither its 64 nor its 1024 most
probable tokens hold p of the mass. A model with random weights gives a near-flat next-token
distribution (its top 64 tokens hold about 1% of the mass), so every row of every step is
sorted, a cost a trained model's user rarely pays. ``decode_speed.py --logit-scales S``
multiplies the random model's output layer by S (same matmul, same cost) to sharpen it; this
script reports, for each scale, the share of rows whose nucleus lies beyond the top 64 and the top
1024 (``nucleus_mask``'s two tries before a full sort) and the nucleus size, beside
the same figures for the embedded SmolLM2 greedy-decoding real Topical-Chat dialogues.

    python benchmarks/nucleus_sizes.py --output benchmarks/results/nucleus_sizes.json
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
from pathlib import Path

import torch
from transformers import LogitsProcessor, LogitsProcessorList

from pmi_decode import build_inputs
from pmi_decode.experiments.benchmarking import (
    random_dialogue_inputs, random_weight_model, real_dialogue_records, shared_data_dir)
from pmi_decode.scores import _NUCLEUS_STAGES

ROOT = Path(__file__).resolve().parents[1]


class NucleusRecorder(LogitsProcessor):
    """Records each row's nucleus size and whether each top-k stage holds p of the mass; changes nothing."""

    def __init__(self, p: float):
        self.p, self.sizes, self.beyond = p, [], {k: [] for k in _NUCLEUS_STAGES}

    def __call__(self, input_ids, scores):
        probs = torch.softmax(scores.float(), dim=-1)
        sorted_probs = probs.sort(dim=-1, descending=True).values
        cumulative = sorted_probs.cumsum(dim=-1)
        sizes = (cumulative - sorted_probs < self.p).sum(dim=-1).clamp(min=1)
        self.sizes += sizes.tolist()
        for k in _NUCLEUS_STAGES:
            self.beyond[k] += (cumulative[:, min(k, cumulative.shape[-1]) - 1] < self.p).tolist()
        return scores


def summary(recorder: NucleusRecorder) -> dict:
    sizes = sorted(recorder.sizes)
    return {
        "steps_rows": len(sizes),
        **{f"share_beyond_top_{k}": round(sum(b) / len(sizes), 4) for k, b in recorder.beyond.items()},
        "nucleus_size_median": statistics.median(sizes),
        "nucleus_size_p90": sizes[int(0.9 * (len(sizes) - 1))],
        "nucleus_size_mean": round(statistics.fmean(sizes), 1),
    }


def trained(args) -> dict:
    from pmi_decode.models import load_model_and_tokenizer

    model, tokenizer = load_model_and_tokenizer("embedded")
    records = real_dialogue_records("topicalchat", shared_data_dir("topicalchat", ROOT))[: args.dialogues]
    recorder = NucleusRecorder(args.p)
    for start in range(0, len(records), 4):
        batch = records[start:start + 4]
        inputs = build_inputs(tokenizer, [r["document"] for r in batch], [r["history"] for r in batch],
                              model=model, max_length=args.max_length, warn_truncation=False)
        with torch.no_grad():
            model.generate(**inputs["conditional"], max_new_tokens=args.new_tokens, do_sample=False,
                           logits_processor=LogitsProcessorList([recorder]), pad_token_id=tokenizer.pad_token_id)
    return {"model": "embedded SmolLM2-135M-Instruct", "data": "topicalchat valid_rare",
            "dialogues": len(records), **summary(recorder)}


def random_model(name: str, scale: float, args) -> dict:
    model = random_weight_model(name, "cpu", logit_scale=scale)
    inputs = random_dialogue_inputs(model, "faithdial", 8, "cpu")
    recorder = NucleusRecorder(args.p)
    with torch.no_grad():
        model.generate(**inputs["conditional"], max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens,
                       do_sample=False, logits_processor=LogitsProcessorList([recorder]))
    return {"model": name, "logit_scale": scale, **summary(recorder)}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=["bart-base", "gpt2-small"])
    parser.add_argument("--scales", nargs="+", type=float, default=[1, 2, 3, 4, 6, 7, 8, 16])
    parser.add_argument("--dialogues", type=int, default=16)
    parser.add_argument("--new-tokens", type=int, default=24)
    parser.add_argument("--max-length", type=int, default=320)
    parser.add_argument("--p", type=float, default=0.9)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--output", default=None)
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    rows = [trained(args)]
    print(rows[-1], flush=True)
    for name in args.models:
        for scale in args.scales:
            rows.append(random_model(name, scale, args))
            print(rows[-1], flush=True)
    result = {"meta": {"p": args.p, "top_k_stages": list(_NUCLEUS_STAGES), "new_tokens": args.new_tokens,
                       "torch": torch.__version__, "machine": platform.machine()}, "rows": rows}
    if args.output:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
