"""Speed of the document-free branch's nucleus-only projection, against the full projection and
plain decoding, on real Topical-Chat dialogues with the embedded SmolLM2-135M model.

    python benchmarks/nucleus_projection.py --threads 1
    python benchmarks/nucleus_projection.py --threads 1 --batch-size 2 --max-new-tokens 48 --repeats 3

``pmi_generate(paired=False)`` in two settings: greedy search with raw scores (where it turns
the nucleus-only projection on by itself) and beam search (4 beams) with
``conditional_end=True, normalize=True`` (on automatically); the "full" rows are the very same calls with the processor built with
``nucleus_projection=False``. Plain decoding runs in the same loop: ``generate`` for greedy, and
for beam search ``generate`` with the prompt run once per dialogue (:func:`prompt_cache`, as
``pmi_generate`` does), so the ratios compare like with like. All calls of one setting decode
the same forced number of tokens (``min_new_tokens = max_new_tokens``); full and nucleus-only
must give the same tokens. The sample, its batch and the data loading are those of
``benchmarks/cli_throughput.py`` (:mod:`pmi_decode.experiments.benchmarking`). Methods run
interleaved, order reversed every other repeat, the 1-minute load average recorded around each
call; medians and per-repeat ratios are written.

``--parts step`` times one document-free decoding step alone (one token through the model with
a KV cache of the sample's document-free prompts, cut back after every call), full projection
against the projection onto ``--columns`` vocabulary columns, for each ``--step-rows``: the most
the option can save per branch step, before the prompt prefills and the conditional forward.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import statistics
import time
from pathlib import Path

import torch

import pmi_decode.generation as generation
from pmi_decode import build_inputs, pmi_generate
from pmi_decode.experiments.benchmarking import real_dialogue_records, shared_data_dir
from pmi_decode.generation import prompt_cache
from pmi_decode.model_calls import cache_keyword, prefill
from pmi_decode.projection import ColumnProjection

ROOT = Path(__file__).resolve().parents[1]

SETTINGS = {"greedy-raw": dict(num_beams=1),
            "beam4-conditional-end": dict(num_beams=4, conditional_end=True, normalize=True)}


@contextlib.contextmanager
def full_projection():
    """pmi_generate as it is, with its processor built with nucleus_projection=False."""
    original = generation.PMIDecode

    def forced(*args, **kwargs):
        return original(*args, **{**kwargs, "nucleus_projection": False})

    generation.PMIDecode = forced
    try:
        yield
    finally:
        generation.PMIDecode = original


def with_columns(model, fn) -> tuple:
    """One call's output, and how many vocabulary columns each of its output projections computed."""
    widths = []
    handle = model.get_output_embeddings().register_forward_hook(lambda m, a, out: widths.append(out.shape[-1]))
    try:
        return fn(), widths
    finally:
        handle.remove()


def methods_for(model, inputs, setting: str, args) -> dict:
    cond = inputs["conditional"]
    options = dict(SETTINGS[setting])
    beams = options.pop("num_beams")
    kw = dict(max_new_tokens=args.max_new_tokens, min_new_tokens=args.max_new_tokens, num_beams=beams,
              pad_token_id=model.generation_config.pad_token_id)

    def pmi():
        return pmi_generate(model, inputs, alpha=args.alpha, p=args.p, paired=False, **options, **kw)

    def pmi_full():
        with full_projection():
            return pmi()

    plain = ((lambda: model.generate(**cond, **kw)) if beams == 1 else
             (lambda: model.generate(**cond, **{cache_keyword(model): prompt_cache(model, cond, beams)}, **kw)))
    return {"plain": plain, "pmi-full-projection": pmi_full, "pmi-nucleus-projection": pmi}


def time_setting(model, inputs, setting: str, args) -> dict:
    methods = methods_for(model, inputs, setting, args)
    vocab = model.get_output_embeddings().weight.shape[0]
    with torch.no_grad():
        runs = {name: with_columns(model, methods[name]) for name in methods}  # also the warm-up
        outputs, widths = {k: v[0] for k, v in runs.items()}, {k: v[1] for k, v in runs.items()}
        times, loads = {name: [] for name in methods}, {name: [] for name in methods}
        for rep in range(args.repeats):
            for name in (list(methods) if rep % 2 == 0 else list(methods)[::-1]):
                before = os.getloadavg()[0]
                start = time.perf_counter()
                methods[name]()
                times[name].append(time.perf_counter() - start)
                loads[name].append([before, os.getloadavg()[0]])
                print(f"  {setting} {name} rep {rep}: {times[name][-1]:.2f} s (load {before:.1f})", flush=True)
    med = {name: statistics.median(v) for name, v in times.items()}
    restricted = [w for w in widths["pmi-nucleus-projection"] if w < vocab]
    return {
        "wall_s": med, "all_wall_s": times, "load_avg_1min_before_after": loads,
        "ratio_to_plain": {name: med[name] / med["plain"] for name in med},
        "ratios_to_plain_per_repeat": {name: [t / p for t, p in zip(v, times["plain"])] for name, v in times.items()},
        "nucleus_to_full_per_repeat": [n / f for n, f in zip(times["pmi-nucleus-projection"],
                                                            times["pmi-full-projection"])],
        "same_tokens_full_and_nucleus": bool(torch.equal(outputs["pmi-full-projection"],
                                                         outputs["pmi-nucleus-projection"])),
        "vocab": vocab,
        "restricted_projections": len(restricted),
        "full_projections_in_nucleus_run": sum(w == vocab for w in widths["pmi-nucleus-projection"]),
        "full_projections_in_full_run": sum(w == vocab for w in widths["pmi-full-projection"]),
        "columns_per_restricted_projection": ({"mean": round(statistics.fmean(restricted), 1),
                                               "median": statistics.median(restricted), "max": max(restricted)}
                                              if restricted else None),
    }


def time_step(model, inputs, rows: int, columns: int, args) -> dict:
    """One branch step (one token, KV cache of the document-free prompts), full projection
    against ``columns`` columns, interleaved; the cache is cut back after every call."""
    uncond = inputs["unconditional"]
    repeats = max(1, rows // uncond["input_ids"].shape[0])
    with torch.no_grad():
        cache, _ = prefill(model, uncond["input_ids"], uncond["attention_mask"], repeats)
        mask = uncond["attention_mask"].repeat_interleave(repeats, dim=0)
        length = cache.get_seq_length()
        token = torch.full((mask.shape[0], 1), 100, dtype=torch.long)
        mask = torch.cat([mask, mask.new_ones((mask.shape[0], 1))], dim=-1)
        kwargs = dict(input_ids=token, attention_mask=mask, **{cache_keyword(model): cache}, use_cache=True,
                      position_ids=mask.long().sum(-1, keepdim=True) - 1)
        projection = ColumnProjection(model)
        with projection.watch():
            logits = model(**kwargs).logits[:, -1]
        cache.crop(-1)  # back to the prompt (transformers 5: tokens to remove)
        if not projection.verify(logits):
            raise SystemExit("the model's head cannot be restricted: nothing to time")
        chosen = torch.randperm(logits.shape[-1], generator=torch.Generator().manual_seed(0))[:columns].sort().values

        def full():
            model(**kwargs)

        def restricted():
            with projection.restricted(chosen):
                projection.widen(model(**kwargs).logits[:, -1], chosen)

        methods = {"full": full, "nucleus": restricted}
        times = {name: [] for name in methods}
        for rep in range(args.step_repeats + 1):
            for name in (list(methods) if rep % 2 == 0 else list(methods)[::-1]):
                start = time.perf_counter()
                methods[name]()
                if rep:  # the first round warms up
                    times[name].append(time.perf_counter() - start)
                cache.crop(-1)  # back to the prompt (transformers 5: tokens to remove)
    med = {name: statistics.median(v) for name, v in times.items()}
    return {"rows": int(mask.shape[0]), "columns": columns, "cache_length": int(length), "median_ms": {
        k: 1000 * v for k, v in med.items()}, "nucleus_to_full": med["nucleus"] / med["full"],
        "load_avg_1min": os.getloadavg()[0]}


def table(result: dict) -> str:
    lines = ["| setting | method | median wall s | x plain |", "|---|---|---:|---:|"]
    for setting, res in result.get("settings", {}).items():
        for name, wall in res["wall_s"].items():
            lines.append(f"| {setting} | {name} | {wall:.2f} | {res['ratio_to_plain'][name]:.3f} |")
    if result.get("step"):
        lines += ["", "| branch step: rows | columns | full ms | nucleus ms | nucleus / full |", "|---:|---:|---:|---:|---:|"]
        lines += [f"| {r['rows']} | {r['columns']} | {r['median_ms']['full']:.1f} | {r['median_ms']['nucleus']:.1f} | "
                  f"{r['nucleus_to_full']:.3f} |" for r in result["step"]]
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", default=None, help="default: shared/data/topicalchat above the checkout")
    parser.add_argument("--model", default="embedded")
    parser.add_argument("--batch-size", type=int, default=2, help="dialogues decoded together")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--alpha", type=float, default=0.5)
    parser.add_argument("--p", type=float, default=0.9)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    parser.add_argument("--parts", nargs="+", default=["calls"], choices=["calls", "step"])
    parser.add_argument("--step-rows", nargs="+", type=int, default=[2, 8], help="step: rows of the branch")
    parser.add_argument("--columns", nargs="+", type=int, default=[64, 512], help="step: projected columns")
    parser.add_argument("--step-repeats", type=int, default=20)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output-dir", default="benchmarks/results/nucleus_projection")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    from pmi_decode.models import load_model_and_tokenizer

    model, tokenizer = load_model_and_tokenizer(args.model)
    data_dir = Path(args.data_dir) if args.data_dir else shared_data_dir("topicalchat", ROOT)
    records = real_dialogue_records("topicalchat", data_dir)
    batch = random.Random(args.seed).sample(records, min(args.batch_size, len(records)))
    inputs = build_inputs(tokenizer, [r["document"] for r in batch], [r["history"] for r in batch], model=model)
    result = {"meta": {"dataset": "topicalchat", "model": args.model, "torch": torch.__version__,
                       "threads": torch.get_num_threads(), "cpus": os.cpu_count(), "args": vars(args),
                       "ids": [r["id"] for r in batch], "load_avg_at_start": os.getloadavg(),
                       "prompt_tokens_per_row": inputs["conditional"]["attention_mask"].sum(-1).tolist(),
                       "document_free_tokens_per_row": inputs["unconditional"]["attention_mask"].sum(-1).tolist()},
              "settings": {}}
    if "calls" in args.parts:
        for setting in args.settings:
            result["settings"][setting] = time_setting(model, inputs, setting, args)
    if "step" in args.parts:
        result["step"] = [time_step(model, inputs, rows, columns, args)
                          for rows in args.step_rows for columns in args.columns]
    result["meta"]["load_avg_at_end"] = os.getloadavg()
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    name = "nucleus_projection" + ("" if args.parts == ["calls"] else "_" + "_".join(args.parts))
    (out / f"{name}.json").write_text(json.dumps(result, indent=1))
    (out / f"{name}.md").write_text(table(result))
    print(table(result))


if __name__ == "__main__":
    main()
