"""Operators per decoding step, per path: what a latency-bound GPU step pays for in host time.

    python benchmarks/op_counts.py --output-dir benchmarks/results/cpu_speed/op_counts

At a small batch a GPU step is bound by the host queueing kernels, not by the device, so the
number of operators a path dispatches per step is a proxy for its cost there that a CPU can
count (no timing: the counts do not depend on the machine). Each path runs with 8 and with 16 new
tokens (forced) under ``torch.profiler``; the difference over 8 steps is the per-step count, the
prompt's one-off work cancelling out. The library's accelerator branches are taken on the CPU
(``STAGED_ON`` and the numpy sort off: the one-sort nucleus; the paired step's checks queued, as
on a GPU), so the counts are those of a GPU step. ``aten::`` operators are counted, views
(``as_strided``, ``view``, ``unsqueeze``, ...) included: they launch no kernel but cost host time.
Random weights of real sizes (BART-base, a Llama shaped like SmolLM2-135M), batch 1, float32.

``--shared-positions`` adds, in beam search on a decoder-only model, the packed path with each
prompt's positions shared by its beams (``pmi_decode.shared_positions``) and held in every row:

    python benchmarks/op_counts.py --models smollm2-135m --modes beam --shared-positions \
        --output-dir benchmarks/results/cpu_speed/op_counts_shared
"""

from __future__ import annotations

import argparse
import collections

import contextlib
from unittest import mock

import torch

import pmi_decode.packed as packed_module
import pmi_decode.paired as paired_module
import pmi_decode.scores as scores_module
from pmi_decode import pmi_generate
from pmi_decode.experiments.benchmarking import random_dialogue_inputs, random_weight_model, save_results

MODES = {"greedy": dict(), "beam": dict(num_beams=4), "sampling": dict(do_sample=True)}
# The operators that launch no kernel: host time only.
VIEWS = {"aten::as_strided", "aten::view", "aten::reshape", "aten::_reshape_alias", "aten::unsqueeze",
         "aten::squeeze", "aten::expand", "aten::slice", "aten::select", "aten::narrow", "aten::alias",
         "aten::transpose", "aten::t", "aten::permute", "aten::unfold", "aten::detach", "aten::lift_fresh",
         "aten::view_as", "aten::split", "aten::chunk", "aten::unbind", "aten::empty", "aten::empty_strided",
         "aten::empty_like", "aten::resize_", "aten::to", "aten::contiguous", "aten::is_nonzero"}


def accelerator_branches() -> None:
    """Take the branches a GPU run takes: one sort for the nucleus, the paired checks queued."""
    scores_module.STAGED_ON = ()
    scores_module._value_sort_nucleus = lambda probs, p: None
    paired_module.READ_AT_ONCE_ON = ()


def counts(fn, steps: int) -> collections.Counter:
    fn(steps)  # warm-up
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        fn(steps)
    return collections.Counter({e.key: e.count for e in prof.key_averages() if e.key.startswith("aten::")})


def per_step(fn) -> dict:
    diff = counts(fn, 16)
    diff.subtract(counts(fn, 8))
    total = sum(diff.values()) / 8
    kernels = sum(v for k, v in diff.items() if k not in VIEWS) / 8
    return {"ops_per_step": total, "kernel_ops_per_step": kernels,
            "by_op": {k: v / 8 for k, v in diff.most_common() if v}}


def paths(model, inputs, mode: str, shared_positions: bool = False) -> dict:
    kw = MODES[mode]
    cond = inputs["conditional"]
    out = {"plain": lambda n: model.generate(**cond, max_new_tokens=n, min_new_tokens=n, **kw),
           "default": lambda n: pmi_generate(model, inputs, max_new_tokens=n, min_new_tokens=n, **kw)}
    if not model.config.is_encoder_decoder:
        out["paired"] = lambda n: pmi_generate(model, inputs, paired=True, max_new_tokens=n, min_new_tokens=n, **kw)
        if shared_positions and kw.get("num_beams", 1) > 1:
            for name, devices in (("packed, shared prompt", ("cpu",)), ("packed, prompt per row", ())):
                out[name] = _packed_with(model, inputs, kw, devices)
    return out


def _packed_with(model, inputs, kw, shared_on):
    """The packed path with ``packed.SHARED_ON`` set to ``shared_on`` (the buffered cache off, as on a GPU)."""
    def run(n):
        with contextlib.ExitStack() as stack:
            stack.enter_context(mock.patch.object(packed_module, "SHARED_ON", shared_on))
            stack.enter_context(mock.patch.object(packed_module, "BUFFERED_ON", ()))
            return pmi_generate(model, inputs, packed=True, max_new_tokens=n, min_new_tokens=n, **kw)
    return run


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=["bart-base", "smollm2-135m"])
    parser.add_argument("--modes", nargs="+", default=["greedy", "beam", "sampling"], choices=list(MODES))
    parser.add_argument("--output-dir", default="benchmarks/results/cpu_speed/op_counts")
    parser.add_argument("--shared-positions", action="store_true",
                        help="also the packed path with the beams' prompt positions shared, and held per row")
    args = parser.parse_args(argv)
    accelerator_branches()
    torch.set_num_threads(1)
    rows = []
    with torch.no_grad():
        for name in args.models:
            model = random_weight_model(name, "cpu")
            inputs = random_dialogue_inputs(model, "faithdial", 1, "cpu")
            for mode in args.modes:
                found = {path: per_step(fn) for path, fn in paths(model, inputs, mode, args.shared_positions).items()}
                for path, r in found.items():
                    rows.append({"model": name, "mode": mode, "path": path, **r,
                                 "ratio_to_plain": r["ops_per_step"] / found["plain"]["ops_per_step"]})
                print(name, mode, {p: r["ops_per_step"] for p, r in found.items()}, flush=True)
    table = "| model | mode | path | ops per step | of which kernels | x plain |\n|---|---|---|---:|---:|---:|\n"
    table += "".join(f"| {r['model']} | {r['mode']} | {r['path']} | {r['ops_per_step']:.0f} | "
                     f"{r['kernel_ops_per_step']:.0f} | {r['ratio_to_plain']:.2f} |\n" for r in rows)
    save_results(args.output_dir, "op_counts", {"args": vars(args), "torch": torch.__version__}, rows, table)


if __name__ == "__main__":
    main()
