"""Beam search on the packed path with and without the generated-positions reorder
(``pmi_decode.packed.generated_positions_reorder``), plain decoding in the same process.

Beam search reorders the whole key/value cache every step; the packed path now moves only the
positions generated so far, since each prompt's rows share their prompt positions. ``whole`` is
the packed path with that reorder switched off (transformers' own, as before the change), so the
two differ in nothing else. Runs interleaved, median of ``--repeats`` after a warm-up each.

    python benchmarks/generated_reorder.py --model embedded --batch 1 --output-dir DIR          (CPU)
    python benchmarks/generated_reorder.py --model llama-1.7b --dtype bfloat16 --device cuda --batch 16 --output-dir DIR
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from unittest import mock

import torch

import pmi_decode.packed
from pmi_decode import pmi_generate
from pmi_decode.experiments.benchmarking import random_dialogue_inputs, random_weight_model


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="embedded")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--beams", type=int, default=4)
    parser.add_argument("--new-tokens", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--output-dir", required=True)
    args = parser.parse_args(argv)
    model = random_weight_model(args.model, args.device, dtype=args.dtype)
    inputs = random_dialogue_inputs(model, "topicalchat", args.batch, args.device)
    kwargs = dict(max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens, num_beams=args.beams)

    def whole():
        with mock.patch.object(pmi_decode.packed, "generated_positions_reorder", lambda *a, **k: None):
            return pmi_generate(model, inputs, packed=True, **kwargs)

    runs = {"plain": lambda: model.generate(**inputs["conditional"], **kwargs),
            "generated": lambda: pmi_generate(model, inputs, packed=True, **kwargs),
            "whole": whole}

    def sync():
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()

    times = {name: [] for name in runs}
    outputs = {}
    with torch.no_grad():
        for name, fn in runs.items():
            torch.manual_seed(0)
            outputs[name] = fn()
        for repeat in range(args.repeats):
            for name, fn in runs.items():
                torch.manual_seed(0)
                sync()
                start = time.perf_counter()
                fn()
                sync()
                times[name].append(time.perf_counter() - start)
            print(f"repeat {repeat + 1}: " + ", ".join(f"{k} {v[-1]:.2f} s" for k, v in times.items()), flush=True)
    median = {name: statistics.median(v) for name, v in times.items()}
    result = {
        "meta": {"args": vars(args), "torch": torch.__version__, "threads": torch.get_num_threads(),
                 "prompt_tokens": int(inputs["conditional"]["input_ids"].shape[1]),
                 "gpu": torch.cuda.get_device_name() if args.device.startswith("cuda") else None},
        "wall_s": median, "all_wall_s": times,
        "generated_ratio": median["generated"] / median["plain"], "whole_ratio": median["whole"] / median["plain"],
        "same_tokens": bool(torch.equal(outputs["generated"], outputs["whole"])),
    }
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    name = f"{args.model}_{args.dtype}_b{args.batch}_beam{args.beams}"
    (out / f"{name}.json").write_text(json.dumps(result, indent=1))
    print(json.dumps({k: v for k, v in result.items() if k not in ("meta", "all_wall_s")}, indent=1))


if __name__ == "__main__":
    main()
