"""What deferring the document-free forward at single-candidate steps saves, at real lengths.

    python benchmarks/deferral.py --ps 0.9 0.6 --batch-sizes 1 8 --output-dir benchmarks/results/cpu_speed

The embedded SmolLM2 model (what ``pmi-decode generate`` uses by default) on real Topical-Chat
dialogues (the same sample as ``benchmarks/nucleus_sizes.py``: the first ``--dialogues`` of
valid_rare), greedy search at a forced output length, with ``pmi-decode generate``'s defaults
(alpha, plausibility head; ``--plausibility`` overrides). Methods, interleaved in one run, order
reversed every other repeat, median of ``--repeats``:

  plain          model.generate
  separate       the separate-cache path as pmi_generate builds it for greedy search and sampling
                 (nucleus projection on), without deferral
  separate-defer the same with ``defer_single_token=True`` (pmi_generate's choice from now on)
  paired         pmi_generate(paired=True) in greedy search (one stacked batch; no deferral): the
                 default path until the packed path became it
  default        pmi_generate as a user calls it: the packed path on this model (both halves in
                 one row; no deferral)

``--modes sampling`` runs sampling (same seed for every method) instead or as well. The JSON
records, for the deferring processor, how many steps ran no document-free forward and how many
tokens each catch-up forward ran; both PMI-Decode separate methods must decode the same tokens.
``--count-only`` runs the deferring processor alone, untimed, and writes those counts
(``deferral_counts.{json,md}``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from pmi_decode import PMIDecode, build_inputs, defaults, pmi_generate
from pmi_decode.experiments.benchmarking import real_dialogue_records, save_results, shared_data_dir

ROOT = Path(__file__).resolve().parents[1]
MODES = {"greedy": dict(), "sampling": dict(do_sample=True)}


def methods(model, inputs, args, p: float, mode: str, record: list):
    """The timed callables of one case; ``record`` collects each deferring run's forwards."""
    cond, uncond = inputs["conditional"], inputs["unconditional"]
    kw = dict(max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens, pad_token_id=args.pad_id,
              **MODES[mode])

    def separate(defer: bool):
        def run():
            proc = PMIDecode(args.alpha, p, model=model, unconditional_inputs=uncond, nucleus_projection=True,
                             plausibility=args.plausibility, defer_single_token=defer)
            out = model.generate(**cond, logits_processor=[proc], **kw)
            if defer:
                record.append(list(proc._branch.forwards))
            return out
        return run

    out = {"plain": lambda: model.generate(**cond, **kw), "separate": separate(False),
           "separate-defer": separate(True)}
    if mode == "greedy":
        out["paired"] = lambda: pmi_generate(model, inputs, alpha=args.alpha, p=p, plausibility=args.plausibility,
                                             paired=True, **kw)
    out["default"] = lambda: pmi_generate(model, inputs, alpha=args.alpha, p=p, plausibility=args.plausibility, **kw)
    return out


def count_case(model, tokenizer, records, args, p: float, mode: str, batch_size: int) -> dict:
    """``--count-only``: the deferring processor once per batch, untimed: how many of the branch's
    steps ran a forward (a count, not a timing: it needs no idle machine)."""
    inputs = _batch_inputs(model, tokenizer, records, batch_size)
    record: list = []
    with torch.no_grad():
        for i, x in enumerate(inputs, 1):
            torch.manual_seed(args.seed)
            methods(model, x, args, p, mode, record)["separate-defer"]()
            print(f"  p {p} {mode} batch {batch_size}: {i}/{len(inputs)} batches, "
                  f"{sum(len(f) for f in record)} branch forwards so far", flush=True)
    return {"p": p, "mode": mode, "batch_size": batch_size, "dialogues": len(records),
            "branch_steps": args.new_tokens * len(inputs) - len(inputs),
            "branch_forwards_with_deferral": sum(len(f) for f in record),
            "catch_up_tokens_per_forward": [n for f in record for n in f]}


def _batch_inputs(model, tokenizer, records, batch_size: int) -> list[dict]:
    batches = [records[i:i + batch_size] for i in range(0, len(records), batch_size)]
    return [build_inputs(tokenizer, [r["document"] for r in b], [r["history"] for r in b], model=model,
                         warn_truncation=False) for b in batches]


def run_case(model, tokenizer, records, args, p: float, mode: str, batch_size: int) -> dict:
    inputs = _batch_inputs(model, tokenizer, records, batch_size)
    record: list = []
    cases = [methods(model, x, args, p, mode, record) for x in inputs]
    names = list(cases[0])
    times = {name: [] for name in names}
    outputs = {}
    with torch.no_grad():
        for rep in range(args.repeats + 1):  # the first round warms up
            for name in (names if rep % 2 == 0 else names[::-1]):
                torch.manual_seed(args.seed)
                start = time.perf_counter()
                outputs[name] = [fn[name]() for fn in cases]
                if rep:
                    times[name].append(time.perf_counter() - start)
            print(f"  p {p} {mode} batch {batch_size} rep {rep}: "
                  + ", ".join(f"{n} {times[n][-1]:.1f}s" for n in names if times[n]), flush=True)
    wall = {name: statistics.median(values) for name, values in times.items()}
    steps = args.new_tokens * len(records)
    forwards = record[-len(inputs):]  # the last round's deferring runs, one per batch
    ran = sum(len(f) for f in forwards)
    return {"p": p, "mode": mode, "batch_size": batch_size, "dialogues": len(records), "wall_s": wall,
            "all_wall_s": times, "ratio_to_plain": {name: w / wall["plain"] for name, w in wall.items()},
            "separate_same_tokens": all(torch.equal(a, b) for a, b in zip(outputs["separate"],
                                                                          outputs["separate-defer"])),
            "branch_steps": args.new_tokens * len(inputs) - len(inputs),
            "branch_forwards_with_deferral": ran,
            "catch_up_tokens_per_forward": [n for f in forwards for n in f],
            "new_tokens_total_rows": steps}


def markdown(rows: list[dict]) -> str:
    """One row per case; a method a mode does not run (``paired`` in sampling) is left blank."""
    names = list(dict.fromkeys(n for r in rows for n in r["wall_s"]))
    cell = lambda values, n: f"{values[n]:.2f}" if n in values else ""  # noqa: E731
    head = ("| p | mode | batch | " + " | ".join(f"{n} s" for n in names) + " | "
            + " | ".join(f"{n} x plain" for n in names[1:]) + " | branch forwards (deferring / not) |\n")
    head += "|---:|---|---:|" + "---:|" * (2 * len(names) - 1) + "---:|\n"
    body = ""
    for r in rows:
        body += (f"| {r['p']} | {r['mode']} | {r['batch_size']} | "
                 + " | ".join(cell(r["wall_s"], n) for n in names) + " | "
                 + " | ".join(cell(r["ratio_to_plain"], n) for n in names[1:])
                 + f" | {r['branch_forwards_with_deferral']} / {r['branch_steps']} |\n")
    return head + body


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", default=None, help="default: shared/data/topicalchat above the checkout")
    parser.add_argument("--dialogues", type=int, default=8)
    parser.add_argument("--batch-sizes", nargs="+", type=int, default=[1, 8])
    parser.add_argument("--ps", nargs="+", type=float, default=[0.9, 0.6])
    parser.add_argument("--modes", nargs="+", default=["greedy"], choices=list(MODES))
    parser.add_argument("--alpha", type=float, default=defaults.ALPHA)
    parser.add_argument("--plausibility", type=float, default=defaults.PLAUSIBILITY)
    parser.add_argument("--new-tokens", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--count-only", action="store_true",
                        help="count the branch's forwards with deferral only (no timing)")
    parser.add_argument("--output-dir", default="benchmarks/results/cpu_speed")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    from pmi_decode.models import load_model_and_tokenizer

    model, tokenizer = load_model_and_tokenizer("embedded")
    args.pad_id = tokenizer.pad_token_id
    data_dir = Path(args.data_dir) if args.data_dir else shared_data_dir("topicalchat", ROOT)
    records = real_dialogue_records("topicalchat", data_dir)[: args.dialogues]
    case = count_case if args.count_only else run_case
    rows = [case(model, tokenizer, records, args, p, mode, batch)
            for mode in args.modes for p in args.ps for batch in args.batch_sizes]
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    if args.count_only:
        (out / "deferral_counts.json").write_text(json.dumps({"args": vars(args), "rows": rows}, indent=1))
        table = "| p | mode | batch | branch steps | forwards with deferral | share skipped |\n|---:|---|---:|---:|---:|---:|\n"
        table += "".join(f"| {r['p']} | {r['mode']} | {r['batch_size']} | {r['branch_steps']} | "
                         f"{r['branch_forwards_with_deferral']} | "
                         f"{1 - r['branch_forwards_with_deferral'] / r['branch_steps']:.2f} |\n" for r in rows)
        (out / "deferral_counts.md").write_text(table)
        print(table)
        return
    meta = {"torch": torch.__version__, "threads": torch.get_num_threads(), "model": "embedded SmolLM2-135M-Instruct",
            "data": "topicalchat valid_rare", "args": {k: v for k, v in vars(args).items()}}
    save_results(out, "deferral", meta, rows, markdown(rows))


if __name__ == "__main__":
    main()
