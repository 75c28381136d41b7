"""Does a static KV cache make PMI-Decode's beam search cheaper on a CPU? Dynamic against static,
alternating, same tokens required.

    python benchmarks/cache_implementation.py --output benchmarks/results/cpu_speed/e2e_cli_defaults/cache_implementation.json

The embedded model on the first batch of 8 Topical-Chat dialogues (the sample of
``benchmarks/cli_throughput.py``), ``pmi_generate`` with alpha 0.25 and the library's defaults, beam 4,
40 new tokens forced. A dynamic cache grows by a copy every step; a static one is allocated at full
length once, but attends over that length at every step.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

import torch

from pmi_decode import pmi_generate
from pmi_decode.experiments.benchmarking import real_dialogue_records, shared_data_dir
from pmi_decode.inputs import build_inputs
from pmi_decode.models import load_model_and_tokenizer

ROOT = Path(__file__).resolve().parents[1]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--output", required=True)
    args = parser.parse_args(argv)
    model, tok = load_model_and_tokenizer("embedded")
    records = real_dialogue_records("topicalchat", shared_data_dir("topicalchat", ROOT))
    batch = random.Random(0).sample(records, 8)
    inputs = build_inputs(tok, [r["document"] for r in batch], [r["history"] for r in batch], model=model)
    kwargs = dict(max_new_tokens=40, min_new_tokens=40, num_beams=4, pad_token_id=tok.pad_token_id)
    kinds = {"dynamic": {}, "static": dict(cache_implementation="static")}
    times, outputs = {k: [] for k in kinds}, {}
    for _ in range(args.repeats):
        for name, extra in kinds.items():
            start = time.perf_counter()
            with torch.no_grad():
                outputs[name] = pmi_generate(model, inputs, alpha=0.25, p=0.9, **kwargs, **extra)
            times[name].append(time.perf_counter() - start)
            print(name, round(times[name][-1], 1), flush=True)
    result = {"wall_s": times, "same_tokens": bool(torch.equal(outputs["dynamic"], outputs["static"])),
              "prompt_tokens_padded": int(inputs["conditional"]["input_ids"].shape[1]), "threads": torch.get_num_threads()}
    Path(args.output).write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
