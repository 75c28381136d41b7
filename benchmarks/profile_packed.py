"""Where a decoding step's time goes, per path: torch.profiler's CUDA-time table for plain
decoding, the default (paired) path and the packed path on one case, with the wall times of a few
attention-kernel choices for the packed path beside them.

    python benchmarks/profile_packed.py --device cuda --batch 16 --mode beam --output-dir OUT
    python benchmarks/profile_packed.py --device cuda --batch 16 --mode beam --sync-debug --output-dir OUT

``--sync-debug`` first runs each path once under ``torch.cuda.set_sync_debug_mode("warn")`` and
counts the host waits for the device by the Python line that caused them (a wait per step makes
the host's time and the device's add up instead of overlapping).
"""

from __future__ import annotations

import argparse
import collections
import json
import time
import traceback
import warnings
from pathlib import Path

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from pmi_decode import pmi_generate
from pmi_decode.experiments.benchmarking import random_dialogue_inputs, random_weight_model

MODES = {"greedy": dict(), "beam": dict(num_beams=4), "sampling": dict(do_sample=True)}


def timed(fn, device: str, repeats: int = 2) -> float:
    """The fastest of ``repeats`` runs after a warm-up, in seconds."""
    def sync():
        if device.startswith("cuda"):
            torch.cuda.synchronize(device)

    fn()
    walls = []
    for _ in range(repeats):
        sync()
        start = time.perf_counter()
        fn()
        sync()
        walls.append(time.perf_counter() - start)
    return min(walls)


def host_waits(fn) -> dict:
    """How often ``fn`` made the host wait for the device, by the innermost lines of our code and
    transformers' that led there (CUDA only)."""
    counts = collections.Counter()

    def record(message, category, filename, lineno, file=None, line=None):
        frames = [f for f in traceback.extract_stack()[:-1]
                  if "pmi_decode" in f.filename or "transformers" in f.filename or "benchmarks" in f.filename]
        counts[" <- ".join(f"{f.filename.rsplit('/', 2)[-1]}:{f.lineno} {f.line}" for f in frames[::-1][:3])] += 1

    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings():  # restores showwarning afterwards
            warnings.simplefilter("always")
            warnings.showwarning = record
            fn()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    return dict(counts.most_common(20))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--model", default="llama-1.7b")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--mode", default="beam", choices=list(MODES))
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--rows", type=int, default=25, help="rows of each profiler table")
    parser.add_argument("--sync-debug", action="store_true", help="count host waits per path first (CUDA)")
    parser.add_argument("--paths", nargs="+", default=["plain", "default", "packed"],
                        choices=["plain", "default", "packed", "packed-short"],
                        help="which paths to time and profile; packed-short: the packed path with each document-free "
                             "prompt cut to its last --short-tokens tokens (does the extra time grow with that half?)")
    parser.add_argument("--short-tokens", type=int, default=8)
    parser.add_argument("--host-side", action=argparse.BooleanOptionalAction, default=True,
                        help="profile the host's side too (slow to tabulate on long runs)")
    parser.add_argument("--profile", nargs="*", default=None,
                        help="the paths to profile (default: all timed ones)")
    parser.add_argument("--backends", action="store_true",
                        help="also time the packed path under each forced attention kernel")
    parser.add_argument("--by-shape", action="store_true",
                        help="also print each path's table grouped by input shapes (which tensors the copies move)")
    parser.add_argument("--output-dir", required=True)
    args = parser.parse_args(argv)
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    model = random_weight_model(args.model, args.device, dtype=args.dtype)
    inputs = random_dialogue_inputs(model, "topicalchat", args.batch, args.device)
    kwargs = dict(max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens, **MODES[args.mode])
    runs = {
        "plain": lambda: model.generate(**inputs["conditional"], **kwargs),
        "default": lambda: pmi_generate(model, inputs, alpha=0.5, p=0.9, **kwargs),
        "packed": lambda: pmi_generate(model, inputs, alpha=0.5, p=0.9, packed=True, **kwargs),
        "packed-short": lambda: pmi_generate(model, short, alpha=0.5, p=0.9, packed=True, **kwargs),
    }
    uncond = inputs["unconditional"]
    short = {"conditional": inputs["conditional"],
             "unconditional": {key: value[:, -args.short_tokens:] for key, value in uncond.items()}}
    runs = {name: fn for name, fn in runs.items() if name in args.paths}
    walls, waits = {}, {}
    with torch.no_grad():
        if args.sync_debug and args.device.startswith("cuda"):
            for name, fn in runs.items():
                fn()  # warm-up outside the count
                waits[name] = host_waits(fn)
            print(json.dumps(waits, indent=1), flush=True)
            (out / "host_waits.json").write_text(json.dumps(waits, indent=1))
        for name, fn in runs.items():
            walls[name] = timed(fn, args.device)
        for backend in ("EFFICIENT_ATTENTION", "MATH", "CUDNN_ATTENTION") if args.backends else ():
            try:
                with sdpa_kernel([getattr(SDPBackend, backend)]):
                    for name, fn in runs.items():
                        walls[f"{name}-{backend.lower()}"] = timed(fn, args.device, repeats=1)
            except Exception as err:  # a backend this case cannot use
                walls[backend.lower()] = f"{type(err).__name__}: {str(err)[:200]}"
        print(json.dumps(walls, indent=1), flush=True)
        tables = {}
        sort_by = "cuda_time_total" if args.device.startswith("cuda") else "cpu_time_total"
        activities = [torch.profiler.ProfilerActivity.CUDA] if args.device.startswith("cuda") else []
        if args.host_side or not activities:
            activities.append(torch.profiler.ProfilerActivity.CPU)
        for name, fn in runs.items():
            if args.profile is not None and name not in args.profile:
                continue
            with torch.profiler.profile(activities=activities,
                                        record_shapes=args.by_shape) as prof:
                fn()
                if args.device.startswith("cuda"):
                    torch.cuda.synchronize(args.device)
            tables[name] = prof.key_averages().table(sort_by=sort_by, row_limit=args.rows)
            if args.device.startswith("cuda") and args.host_side:  # the host's side: what each path asks of the CPU per step
                tables[f"{name} by host time"] = prof.key_averages().table(sort_by="self_cpu_time_total",
                                                                           row_limit=args.rows)
            if args.by_shape:
                tables[f"{name} by shape"] = prof.key_averages(group_by_input_shape=True).table(
                    sort_by=sort_by, row_limit=args.rows, max_name_column_width=40, max_shapes_column_width=90)
            for key in (name, f"{name} by host time", f"{name} by shape"):
                if key in tables:
                    print(f"== {key}\n{tables[key]}", flush=True)
    stem = f"profile_{args.model}_{args.mode}_b{args.batch}"
    (out / f"{stem}.json").write_text(json.dumps({"args": vars(args), "walls_s": walls, "host_waits": waits}, indent=1))
    (out / f"{stem}.txt").write_text("\n".join(f"== {name}\n{table}" for name, table in tables.items()))


if __name__ == "__main__":
    main()
