"""Speed at real lengths: dialogues per second of ``pmi-decode generate``, plain against PMI-Decode.

    python benchmarks/cli_throughput.py --dataset topicalchat --dialogues 8
    python benchmarks/cli_throughput.py --dataset multidoc2dial --dialogues 8 --profile
    python benchmarks/cli_throughput.py --dataset topicalchat --processes 1 2 --threads 1   # scale-out

Real dialogues from ``--data-dir`` (the official files, read by ``pmi_decode.data``):

1. **Length profile** of the whole split in the model's tokens: document, history and the
   prompt ``generate`` builds (mean, median, 90th percentile).
2. **End to end**: the ``generate`` command (``pmi_decode.cli.main``, in this process, model
   loading included) on a fixed random sample of ``--dialogues`` dialogues; plain decoding is the
   same command with ``--alpha 0 --p 1`` (so both run each prompt once per dialogue). The two
   run interleaved, ``--repeats`` times each, order alternating; the median is reported. The
   machine may be busy, so the ratio is the figure to read.
3. **Model level** (the same batches, no command): ``generate`` and ``pmi_generate`` on the
   sample's first batch at the same forced output length, interleaved (``--methods``): plain
   (prompt per beam, and once per dialogue), plain decoding of the paired path's stacked batch
   (conditional and document-free rows, once per dialogue: the floor of a one-batch path), the
   paired path with its old joint prefill and with each half prefilled at its own width, and
   the separate-cache path.
   ``--parts prefill`` times the paired path's prompt prefill alone, joint against own-length.
   ``--batch-pick median`` times the middle batch of the sample sorted by length (as
   ``generate`` batches it) instead of the first batch as drawn.
4. ``--profile``: where one PMI-Decode batch and one plain batch spend their time (cProfile by
   function; ``--profile-ops`` adds torch.profiler's operators), written beside the JSON.
5. ``--processes 1 2``: the same command as 1 and 2 processes (``accelerate launch``, each
   process ``--threads`` threads), timed from outside, outputs compared record for record.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from pmi_decode.cli import main as cli_main
from pmi_decode.experiments.benchmarking import DIALOGUE_SPLITS, real_dialogue_records, shared_data_dir
from pmi_decode.inputs import build_inputs, encode_dialogue

ROOT = Path(__file__).resolve().parents[1]


def _stats(values: list[int]) -> dict:
    ordered = sorted(values)
    return {"mean": round(statistics.fmean(values), 1), "median": statistics.median(values),
            "p90": ordered[int(0.9 * (len(ordered) - 1))], "max": ordered[-1]}


def length_profile(records: list[dict], tokenizer, max_length: int | None) -> dict:
    """Token counts as ``generate`` sees them: document and history apart, and the whole prompt."""
    doc, hist, prompt, words = [], [], [], []
    for r in records:
        doc.append(len(tokenizer(r["document"], add_special_tokens=False).input_ids))
        hist.append(sum(len(tokenizer(t, add_special_tokens=False).input_ids) for t in r["history"]))
        words.append(len(r["document"].split()))
        enc = encode_dialogue(tokenizer, r["document"], r["history"], is_encoder_decoder=False, max_length=max_length)
        prompt.append(len(enc.conditional))
    return {"dialogues": len(records), "document_words": _stats(words), "document_tokens": _stats(doc),
            "history_tokens": _stats(hist), "prompt_tokens": _stats(prompt)}


def _write_jsonl(path: Path, records: list[dict]) -> None:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))


def _generate_args(args, inp: Path, out: Path, plain: bool, packed: bool = False) -> list[str]:
    argv = ["generate", "--model", args.model, "--input", str(inp), "--output", str(out), "--quiet",
            "--num-beams", str(args.num_beams), "--max-new-tokens", str(args.max_new_tokens),
            "--batch-size", str(args.batch_size)]
    argv += [f"--{key}={getattr(args, key)}" for key in ("device", "dtype") if getattr(args, key)]
    if plain:
        return argv + ["--alpha", "0", "--p", "1"]
    path = (["--packed", "on" if packed else "off"] if args.also_packed else [])
    return argv + ([] if args.cli_defaults else ["--alpha", str(args.alpha), "--p", str(args.p)]) + path


def end_to_end(args, inp: Path, work: Path) -> dict:
    names = ["plain", "pmi"] + (["pmi_packed"] if args.also_packed else [])
    times = {name: [] for name in names}
    n = sum(1 for _ in open(inp))
    outputs = {}
    for rep in range(args.repeats):
        order = names if rep % 2 == 0 else names[::-1]
        for name in order:
            out = work / f"e2e-{name}-{rep}.jsonl"
            start = time.perf_counter()
            if cli_main(_generate_args(args, inp, out, plain=name == "plain", packed=name == "pmi_packed")) != 0:
                raise SystemExit(f"generate failed ({name})")
            times[name].append(time.perf_counter() - start)
            outputs[name] = [json.loads(line)["pmi_response"] for line in open(out)]
            print(f"  end to end {name} rep {rep}: {times[name][-1]:.1f} s", flush=True)
    plain, pmi = statistics.median(times["plain"]), statistics.median(times["pmi"])
    result = {"dialogues": n, "wall_s": {"plain": plain, "pmi": pmi}, "all_wall_s": times,
              "dialogues_per_s": {"plain": n / plain, "pmi": n / pmi}, "ratio_pmi_to_plain": pmi / plain,
              "responses_differ": sum(a != b for a, b in zip(outputs["plain"], outputs["pmi"])),
              # the command stops each response at its end token: a system that writes shorter responses
              # is faster for that alone, so the lengths stand beside the times
              "mean_response_words": {name: statistics.fmean(len(r.split()) for r in texts) if texts else 0.0
                                      for name, texts in outputs.items()}}
    if args.also_packed:
        packed = statistics.median(times["pmi_packed"])
        result["wall_s"]["pmi_packed"] = packed
        result["dialogues_per_s"]["pmi_packed"] = n / packed
        result["ratio_pmi_packed_to_plain"] = packed / plain
        result["packed_responses_differ_from_pmi"] = sum(a != b for a, b in zip(outputs["pmi"], outputs["pmi_packed"]))
    return result


def timed_batch(args, tokenizer, records: list[dict]) -> list[dict]:
    """The batch the model-level parts time. ``first``: the sample's first ``--batch-size``
    dialogues as drawn (rows of very different lengths). ``median``: the sample sorted by
    prompt length and cut into batches as ``generate`` does, and the middle batch taken (rows of
    similar length, as in a real run)."""
    if args.batch_pick == "first":
        return records[: args.batch_size]
    lengths = [len(encode_dialogue(tokenizer, r["document"], r["history"], is_encoder_decoder=False).conditional)
               for r in records]
    order = sorted(range(len(records)), key=lambda i: -lengths[i])
    batches = [order[i : i + args.batch_size] for i in range(0, len(order), args.batch_size)]
    return [records[i] for i in batches[len(batches) // 2]]


def prefill_only(args, model, tokenizer, records: list[dict]) -> dict:
    """The paired path's prompt prefill alone, the stacked batch as one (joint) against each half
    at its own width, interleaved; the two caches must agree at the real positions."""
    from pmi_decode.generation import paired_prompt_cache, prompt_cache
    from pmi_decode.paired import stack_inputs

    batch = timed_batch(args, tokenizer, records)
    inputs = build_inputs(tokenizer, [r["document"] for r in batch], [r["history"] for r in batch], model=model)
    joint = stack_inputs(model, inputs, tokenizer.pad_token_id)
    methods = {"joint": lambda: prompt_cache(model, joint, args.num_beams),
               "own-length": lambda: paired_prompt_cache(model, joint, args.num_beams)}
    times, loads, caches = {k: [] for k in methods}, {k: [] for k in methods}, {}
    with torch.no_grad():
        for rep in range(args.repeats):
            for name in (list(methods) if rep % 2 == 0 else list(methods)[::-1]):
                before = os.getloadavg()[0]
                start = time.perf_counter()
                caches[name] = methods[name]()
                times[name].append(time.perf_counter() - start)
                loads[name].append([before, os.getloadavg()[0]])
                print(f"  prefill {name} rep {rep}: {times[name][-1]:.1f} s (load {before:.1f})", flush=True)
    real = joint["attention_mask"][:, :-1].bool().repeat_interleave(args.num_beams, dim=0)
    diff = max(float((a.keys - b.keys).transpose(1, 2)[real].abs().max())
               for a, b in zip(caches["joint"].layers, caches["own-length"].layers))
    med = {k: statistics.median(v) for k, v in times.items()}
    mask = joint["attention_mask"]
    return {"batch": len(batch), "stacked_width": int(mask.shape[1]),
            "real_tokens_per_row": mask.sum(-1).tolist(), "wall_s": med, "all_wall_s": times,
            "load_avg_1min_before_after": loads, "ratio_own_to_joint": med["own-length"] / med["joint"],
            "max_abs_key_difference_at_real_positions": diff}


def _joint_prefill(fn):
    """Run ``fn`` with the paired path's old prompt prefill: the stacked batch as one, the
    document-free rows padded to the conditional width (what ``paired_prompt_cache`` replaced)."""
    from unittest import mock

    from pmi_decode import generation

    def run():
        with mock.patch.object(generation, "paired_prompt_cache", generation.prompt_cache):
            return fn()

    return run


MODEL_LEVEL_METHODS = ["plain", "plain-prompt-once", "plain-stacked-prompt-once", "pmi-paired-joint-prefill",
                       "pmi-paired", "pmi-separate"]


def stacked_batch(cond: dict, uncond: dict, pad_id: int) -> dict:
    """The conditional rows with the document-free rows under them, left-padded to the
    conditional width: the batch the paired path decodes, for plain ``generate`` to decode as the
    floor of any path that runs both branches as one batch."""
    extra = cond["input_ids"].shape[1] - uncond["input_ids"].shape[1]
    if extra < 0:
        raise SystemExit("document-free prompts are wider than the conditional ones")
    pad = torch.nn.functional.pad
    return {"input_ids": torch.cat([cond["input_ids"], pad(uncond["input_ids"], (extra, 0), value=pad_id)]),
            "attention_mask": torch.cat([cond["attention_mask"], pad(uncond["attention_mask"], (extra, 0), value=0)])}


def model_level(args, model, tokenizer, records: list[dict]) -> dict:
    """``generate`` and ``pmi_generate`` on the sample's first batch at one forced output length,
    interleaved (order reversed every other repeat), load average recorded around every run; the
    PMI-Decode methods must decode the same tokens."""
    from pmi_decode import pmi_generate
    from pmi_decode.generation import prompt_cache
    from pmi_decode.model_calls import cache_keyword

    batch = timed_batch(args, tokenizer, records)
    inputs = build_inputs(tokenizer, [r["document"] for r in batch], [r["history"] for r in batch], model=model)
    cond = inputs["conditional"]
    stacked = stacked_batch(cond, inputs["unconditional"], tokenizer.pad_token_id)
    kw = dict(max_new_tokens=args.max_new_tokens, min_new_tokens=args.max_new_tokens, num_beams=args.num_beams,
              pad_token_id=tokenizer.pad_token_id)
    pmi = lambda **extra: lambda: pmi_generate(model, inputs, alpha=args.alpha, p=args.p, **extra, **kw)  # noqa: E731
    every = {
        "plain": lambda: model.generate(**cond, **kw),
        "plain-prompt-once": lambda: model.generate(**cond, **{cache_keyword(model): prompt_cache(model, cond, args.num_beams)},
                                                    **kw),
        "plain-stacked-prompt-once": lambda: model.generate(
            **stacked, **{cache_keyword(model): prompt_cache(model, stacked, args.num_beams)}, **kw),
        "pmi-paired-joint-prefill": _joint_prefill(pmi(paired=True)),
        "pmi-paired": pmi(paired=True),
        "pmi-separate": pmi(paired=False),
    }
    methods = {name: every[name] for name in args.methods}
    times, loads, outputs = {k: [] for k in methods}, {k: [] for k in methods}, {}
    with torch.no_grad():
        for rep in range(args.repeats):
            for name in (list(methods) if rep % 2 == 0 else list(methods)[::-1]):
                before = os.getloadavg()[0]
                start = time.perf_counter()
                outputs[name] = methods[name]()
                times[name].append(time.perf_counter() - start)
                loads[name].append([before, os.getloadavg()[0]])
                print(f"  model level {name} rep {rep}: {times[name][-1]:.1f} s (load {before:.1f})", flush=True)
    med = {k: statistics.median(v) for k, v in times.items()}
    pmi_outputs = [out for name, out in outputs.items() if name.startswith("pmi")]
    base = "plain-prompt-once" if "plain-prompt-once" in med else next(iter(med))
    uncond_mask = inputs["unconditional"]["attention_mask"]
    return {"batch": len(batch), "batch_pick": args.batch_pick, "prompt_tokens_padded": int(cond["input_ids"].shape[1]),
            "prompt_tokens_per_row": cond["attention_mask"].sum(-1).tolist(),
            "document_free_tokens_padded": int(uncond_mask.shape[1]),
            "document_free_tokens_per_row": uncond_mask.sum(-1).tolist(),
            "wall_s": med, "all_wall_s": times, "load_avg_1min_before_after": loads,
            "pmi_methods_same_tokens": all(torch.equal(out, pmi_outputs[0]) for out in pmi_outputs),
            f"ratio_to_{base.replace('-', '_')}": {k: v / med[base] for k, v in med.items()},
            "ratios_per_repeat": {k: [t / b for t, b in zip(v, times[base])] for k, v in times.items()}}


def profile_batch(args, model, tokenizer, records: list[dict], out_dir: Path) -> dict:
    """Where one PMI-Decode batch (and one plain batch) spends its time: cProfile by function,
    the top functions by own time in the JSON, the full listing beside it. ``--profile-ops``
    adds torch.profiler's operator table (memory-hungry at real lengths)."""
    from pmi_decode import pmi_generate
    from pmi_decode.generation import prompt_cache
    from pmi_decode.model_calls import cache_keyword

    batch = records[: args.batch_size]
    inputs = build_inputs(tokenizer, [r["document"] for r in batch], [r["history"] for r in batch], model=model)
    cond = inputs["conditional"]
    stacked = stacked_batch(cond, inputs["unconditional"], tokenizer.pad_token_id)
    kw = dict(max_new_tokens=args.max_new_tokens, min_new_tokens=args.max_new_tokens, num_beams=args.num_beams,
              pad_token_id=tokenizer.pad_token_id)
    runs = {
        "pmi": lambda: pmi_generate(model, inputs, alpha=args.alpha, p=args.p, **kw),
        "plain": lambda: model.generate(**cond, **{cache_keyword(model): prompt_cache(model, cond, args.num_beams)}, **kw),
    }
    summary = {"batch": len(batch), "prompt_tokens_padded": int(cond["input_ids"].shape[1])}
    with torch.no_grad():
        for name, fn in runs.items():
            prof_py = cProfile.Profile()
            start = time.perf_counter()
            prof_py.enable()
            fn()
            prof_py.disable()
            wall = time.perf_counter() - start
            stats = pstats.Stats(prof_py)
            rows = sorted(((key, value[2], value[3], value[1]) for key, value in stats.stats.items()),
                          key=lambda row: -row[1])
            total = sum(row[1] for row in rows)
            summary[name] = {
                "wall_s": wall, "profiled_s": total,
                "top_own_time": [{"function": f"{Path(k[0]).name}:{k[1]}({k[2]})", "own_s": round(tt, 3),
                                  "share": round(tt / total, 4), "calls": calls} for k, tt, _, calls in rows[:15]],
            }
            text = io.StringIO()
            pstats.Stats(prof_py, stream=text).sort_stats("tottime").print_stats(40)
            (out_dir / f"profile_{args.dataset}_{name}_python.txt").write_text(text.getvalue())
            if args.profile_ops:
                from torch.profiler import ProfilerActivity, profile

                with profile(activities=[ProfilerActivity.CPU]) as prof:
                    fn()
                table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25)
                (out_dir / f"profile_{args.dataset}_{name}_ops.txt").write_text(table)
    return summary


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def process_scaling(args, inp: Path, work: Path) -> dict:
    """Wall time of the same command as 1 and N processes (each from a fresh interpreter)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS=str(args.threads or 1), CUDA_VISIBLE_DEVICES="")
    n = sum(1 for _ in open(inp))
    times, outputs = {p: [] for p in args.processes}, {}
    for rep in range(args.repeats):
        for procs in (args.processes if rep % 2 == 0 else args.processes[::-1]):
            out = work / f"procs{procs}-{rep}.jsonl"
            gen = _generate_args(args, inp, out, plain=False)
            if procs == 1:
                cmd = [sys.executable, "-m", "pmi_decode.cli", *gen]
            else:
                cmd = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", str(procs),
                       "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
                       "--main_process_port", str(_free_port()), "-m", "pmi_decode.cli", *gen]
            start = time.perf_counter()
            run = subprocess.run(cmd, env=env, capture_output=True, text=True)
            times[procs].append(time.perf_counter() - start)
            if run.returncode != 0:
                raise SystemExit(f"{procs} processes failed:\n{run.stderr[-3000:]}")
            outputs[procs] = sorted((json.loads(line) for line in open(out)), key=lambda r: str(r["id"]))
            print(f"  {procs} process(es) rep {rep}: {times[procs][-1]:.1f} s", flush=True)
    base = statistics.median(times[args.processes[0]])
    return {
        "dialogues": n, "threads_per_process": int(args.threads or 1),
        "wall_s": {str(p): statistics.median(t) for p, t in times.items()},
        "all_wall_s": {str(p): t for p, t in times.items()},
        "throughput_vs_first": {str(p): base / statistics.median(t) for p, t in times.items()},
        "identical_records": all(outputs[p] == outputs[args.processes[0]] for p in args.processes),
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", default="topicalchat", choices=list(DIALOGUE_SPLITS))
    parser.add_argument("--data-dir", default=None, help="default: shared/data/<dataset> above the checkout")
    parser.add_argument("--input", default=None,
                        help="dialogues as generate input records (JSON lines) instead of the data set's split, "
                             "e.g. benchmarks/fixtures/topicalchat_valid_rare_100.jsonl where the data folder is absent")
    parser.add_argument("--device", default=None, help="generate's --device (default: its own choice)")
    parser.add_argument("--dtype", default=None, help="generate's --dtype")
    parser.add_argument("--cli-defaults", action="store_true",
                        help="the PMI-Decode run takes the command's own defaults instead of --alpha and --p")
    parser.add_argument("--also-packed", action="store_true",
                        help="end_to_end: time the PMI run with --packed off (pmi) and with --packed on "
                             "(pmi_packed), interleaved with plain decoding")
    parser.add_argument("--model", default="embedded")
    parser.add_argument("--dialogues", type=int, default=8, help="size of the timed random sample")
    parser.add_argument("--num-beams", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=40)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--alpha", type=float, default=0.5)
    parser.add_argument("--p", type=float, default=0.9)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (per process with --processes)")
    parser.add_argument("--parts", nargs="*", default=["lengths", "end_to_end", "model_level"],
                        choices=["lengths", "end_to_end", "model_level", "prefill"])
    parser.add_argument("--batch-pick", default="first", choices=["first", "median"],
                        help="model_level/prefill: the sample's first batch as drawn, or the middle batch of the "
                             "sample sorted by prompt length as generate batches it")
    parser.add_argument("--methods", nargs="+", default=MODEL_LEVEL_METHODS, choices=MODEL_LEVEL_METHODS,
                        help="model_level: which methods to time (the first PMI-Decode ones must agree)")
    parser.add_argument("--profile", action="store_true", help="also profile one PMI-Decode batch")
    parser.add_argument("--profile-ops", action="store_true", help="with --profile: torch.profiler operators too")
    parser.add_argument("--processes", nargs="+", type=int, default=None, help="scale-out instead, e.g. 1 2")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output-dir", default="benchmarks/results/real_lengths")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    out_dir = Path(args.output_dir)
    out_dir.mkdir(parents=True, exist_ok=True)

    from pmi_decode.models import load_model_and_tokenizer

    model, tokenizer = load_model_and_tokenizer(args.model, device=args.device, dtype=args.dtype)
    if args.input:
        records = [json.loads(line) for line in open(args.input) if line.strip()]
    else:
        data_dir = Path(args.data_dir) if args.data_dir else shared_data_dir(args.dataset, ROOT)
        records = real_dialogue_records(args.dataset, data_dir)
    sample = random.Random(args.seed).sample(records, min(args.dialogues, len(records)))
    result = {"meta": {"dataset": args.input or args.dataset, "model": args.model, "torch": torch.__version__,
                       "threads": torch.get_num_threads(), "cpus": os.cpu_count(), "args": vars(args),
                       "load_avg_at_start": os.getloadavg()}}
    limit = model.config.max_position_embeddings - args.max_new_tokens
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        inp = work / "sample.jsonl"
        _write_jsonl(inp, sample)
        if args.processes:
            result["scaling"] = process_scaling(args, inp, work)
            name = f"scaling_{args.dataset}"
        else:
            if "lengths" in args.parts:
                result["length_profile_split"] = length_profile(records, tokenizer, limit)
                result["length_profile_sample"] = length_profile(sample, tokenizer, limit)
                print(json.dumps(result["length_profile_split"], indent=1), flush=True)
            if "end_to_end" in args.parts:
                result["end_to_end"] = end_to_end(args, inp, work)
            if "prefill" in args.parts:
                result["prefill"] = prefill_only(args, model, tokenizer, sample)
            if "model_level" in args.parts:
                result["model_level"] = model_level(args, model, tokenizer, sample)
            if args.profile:
                result["profile"] = profile_batch(args, model, tokenizer, sample, out_dir)
            name = f"real_lengths_{args.dataset}"
    result["meta"]["load_avg_at_end"] = os.getloadavg()
    (out_dir / f"{name}.json").write_text(json.dumps(result, indent=1))
    print(json.dumps({k: v for k, v in result.items() if k != "meta"}, indent=1))


if __name__ == "__main__":
    main()
