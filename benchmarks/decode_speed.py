"""Decoding speed of PMI-Decode against plain decoding and peers, side by side in one run.

    python benchmarks/decode_speed.py                      # CPU, the issue's default grid
    python benchmarks/decode_speed.py --device cuda        # the same on a GPU
    python benchmarks/decode_speed.py --models gpt2-small --modes greedy --batch-sizes 8 --new-tokens 64

Methods (each row of the table):
  plain      model.generate, no processor
  plain-2x-rows  model.generate on the batch stacked on itself: what twice the rows cost, the
             floor of a path that runs both branches as one batch
  separate   PMIDecode(alpha, p, model=..., unconditional_inputs=...): its own KV cache
  default    pmi_generate as a user calls it (its defaults pick the path: packed on decoder-only
             models where the call can take it, else paired, else separate); the issue's targets
             are on this row
  separate-deferred  pmi_generate(paired=False) in greedy search and sampling: the separate path with
             single-candidate steps deferred (sampling's default before the paired sampling loop)
  paired     pmi_generate(paired=True): both branches in one batch (greedy, beam search, sampling;
             not beam sampling)
  packed     pmi_generate(packed=True), decoder-only: both halves in one row, the document-free half
             at its own length in the cache (pmi_decode/packed.py; every mode)
  *-prompt-once  decoder-only beam modes: the prompt runs once per dialogue, not once per beam
             (pmi_generate's default, share_prompt=True; for plain decoding, prompt_cache)
  recompute  a processor that re-runs the whole unconditional prefix every step (no cache)
  cfg        transformers' UnbatchedClassifierFreeGuidanceLogitsProcessor (decoder-only, greedy)

Models have random weights built from configs of the real sizes (BART-base and -large, GPT-2 small,
a Llama shaped like SmolLM2-1.7B or -135M: ``REAL_SIZES``), in ``--dtype``; the embedded SmolLM2
model is real. ``--doc-tokens`` sets the document length in tokens instead of the data set's mean. Inputs are random token ids with the mean lengths of the paper's
data sets (document / history / response words, times 1.3 tokens per word), rows of slightly
different lengths so padding is exercised. Output lengths are forced equal
(min_new_tokens = max_new_tokens). Each method runs once to warm up, then ``--repeats`` times
interleaved with the others; the median wall time is reported, with generated tokens per second,
the ratio to plain decoding, and the peak memory the call added (CUDA allocator peak on a GPU;
sampled resident set size on a CPU).
"""

from __future__ import annotations

import argparse
import gc
import statistics
import threading
import time

import torch
from transformers import LogitsProcessor
from transformers.generation.logits_process import UnbatchedClassifierFreeGuidanceLogitsProcessor

from pmi_decode import PMIDecode, pmi_generate
from pmi_decode.experiments.benchmarking import MEAN_WORDS, random_dialogue_inputs, random_weight_model, save_results
from pmi_decode.generation import prompt_cache
from pmi_decode.model_calls import cache_keyword

MODES = {
    "greedy": dict(),
    "sampling": dict(do_sample=True),
    "beam": dict(num_beams=4),
    "beam_sampling": dict(num_beams=4, do_sample=True),
}


class RecomputePMI(LogitsProcessor):
    """The naive way: re-run the model on the whole unconditional sequence at every step."""

    def __init__(self, alpha, p, model, uncond, prompt_length):
        self.alpha, self.p, self.model, self.uncond, self.prompt_length = alpha, p, model, uncond, prompt_length

    def __call__(self, input_ids, scores):
        from pmi_decode import pmi_scores

        rows = input_ids.shape[0]
        k = rows // self.uncond["input_ids"].shape[0]
        ids = self.uncond["input_ids"].repeat_interleave(k, 0)
        mask = self.uncond["attention_mask"].repeat_interleave(k, 0)
        with torch.no_grad():
            if self.model.config.is_encoder_decoder:
                logits = self.model(input_ids=ids, attention_mask=mask, decoder_input_ids=input_ids).logits[:, -1]
            else:
                gen = input_ids[:, self.prompt_length :]
                ids = torch.cat([ids, gen], 1)
                mask = torch.cat([mask, torch.ones_like(gen)], 1)
                pos = (mask.cumsum(-1) - 1).clamp(min=0)
                logits = self.model(input_ids=ids, attention_mask=mask, position_ids=pos).logits[:, -1]
        return pmi_scores(scores, torch.log_softmax(logits.to(scores.dtype), -1), self.alpha, self.p)


class PeakMemory:
    """Peak memory added during a block: CUDA allocator peak, or sampled RSS on a CPU."""

    def __init__(self, device: str):
        self.device = device

    @staticmethod
    def _rss() -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * 4096

    def __enter__(self):
        gc.collect()  # what the last call left in reference cycles (its cache) is freed now, not mid-block
        if self.device.startswith("cuda"):
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            self.base = torch.cuda.memory_allocated()
        else:
            self.base = self.peak = self._rss()
            self.running = True
            self.thread = threading.Thread(target=self._sample, daemon=True)
            self.thread.start()
        return self

    def _sample(self):
        while self.running:
            self.peak = max(self.peak, self._rss())
            time.sleep(0.002)

    def __exit__(self, *exc):
        if self.device.startswith("cuda"):
            torch.cuda.synchronize()
            self.added = torch.cuda.max_memory_allocated() - self.base
        else:
            self.running = False
            self.thread.join()
            self.added = max(0, self.peak - self.base)


def beams_of(mode: str) -> int:
    return MODES[mode].get("num_beams", 1)


def runners(model, inputs, mode: str, alpha: float, p: float, new_tokens: int):
    kwargs = dict(max_new_tokens=new_tokens, min_new_tokens=new_tokens, **MODES[mode])
    cond, uncond = inputs["conditional"], inputs["unconditional"]
    out = {
        "plain": lambda: model.generate(**cond, **kwargs),
        "separate": lambda: model.generate(
            **cond, logits_processor=[PMIDecode(alpha, p, model=model, unconditional_inputs=uncond)], **kwargs
        ),
        "recompute": lambda: model.generate(
            **cond,
            logits_processor=[RecomputePMI(alpha, p, model, uncond, cond["input_ids"].shape[1])],
            **kwargs,
        ),
    }
    # The paired path's floor: plain decoding of twice the rows (the batch stacked on itself).
    double = {key: torch.cat([value, value]) for key, value in cond.items()}
    out["plain-2x-rows"] = lambda: model.generate(**double, **kwargs)
    out["default"] = lambda: pmi_generate(model, inputs, alpha=alpha, p=p, **kwargs)
    beams = beams_of(mode)
    if beams == 1:
        # pmi_generate's separate path (single-candidate steps deferred): sampling's default before
        # the paired sampling loop
        out["separate-deferred"] = lambda: pmi_generate(model, inputs, alpha=alpha, p=p, paired=False, **kwargs)
    if not (MODES[mode].get("do_sample") and beams > 1):
        out["paired"] = lambda: pmi_generate(model, inputs, alpha=alpha, p=p, paired=True, **kwargs)
    if beams > 1 and not model.config.is_encoder_decoder:
        # generate runs the prompt once per beam; these run it once per dialogue (same tokens).
        out["plain-prompt-once"] = lambda: model.generate(**cond, **{cache_keyword(model): prompt_cache(model, cond, beams)}, **kwargs)
        out["separate-prompt-once"] = lambda: pmi_generate(model, inputs, alpha=alpha, p=p, paired=False, **kwargs)
        if not MODES[mode].get("do_sample"):
            out["paired"] = lambda: pmi_generate(model, inputs, alpha=alpha, p=p, paired=True, share_prompt=False,
                                                 **kwargs)
            out["paired-prompt-once"] = lambda: pmi_generate(model, inputs, alpha=alpha, p=p, paired=True, **kwargs)
    if not model.config.is_encoder_decoder:
        out["packed"] = lambda: pmi_generate(model, inputs, alpha=alpha, p=p, packed=True, **kwargs)
    if mode == "greedy" and not model.config.is_encoder_decoder:
        out["cfg"] = lambda: model.generate(
            **cond,
            logits_processor=[
                UnbatchedClassifierFreeGuidanceLogitsProcessor(
                    1.5, model, uncond["input_ids"], uncond["attention_mask"], use_cache=True
                )
            ],
            **kwargs,
        )
    return out


def run_case(model, model_name, dataset, mode, batch, args, doc_tokens=None) -> list[dict]:
    inputs = random_dialogue_inputs(model, dataset, batch, args.device, doc_tokens=doc_tokens)
    methods = runners(model, inputs, mode, args.alpha, args.p, args.new_tokens)
    if args.methods:
        methods = {k: v for k, v in methods.items() if k in args.methods or k == "plain"}
    times = {name: [] for name in methods}
    memory = {}
    generated = {}
    with torch.no_grad():
        for name, fn in methods.items():  # warm-up, and one memory measurement
            torch.manual_seed(0)
            with PeakMemory(args.device) as mem:
                out = fn()
            memory[name] = mem.added
            generated[name] = (out.shape[1] - (0 if model.config.is_encoder_decoder else inputs["conditional"]["input_ids"].shape[1])) * out.shape[0]
        for _ in range(args.repeats):
            for name, fn in methods.items():
                torch.manual_seed(0)
                if args.device.startswith("cuda"):
                    torch.cuda.synchronize()
                start = time.perf_counter()
                fn()
                if args.device.startswith("cuda"):
                    torch.cuda.synchronize()
                times[name].append(time.perf_counter() - start)
    plain = statistics.median(times["plain"])
    prompt = inputs["conditional"]["input_ids"].shape[1]
    rows = []
    for name in methods:
        wall = statistics.median(times[name])
        rows.append({
            "model": model_name, "dtype": args.dtype, "data": dataset, "prompt_tokens": prompt, "mode": mode,
            "batch": batch, "method": name, "new_tokens": args.new_tokens, "wall_s": wall,
            "tokens_per_s": generated[name] / wall, "ratio_to_plain": wall / plain,
            "peak_added_mb": memory[name] / 2**20, "memory_ratio": memory[name] / max(memory["plain"], 1),
            "walls_s": times[name],
        })
    return rows


def summary(rows: list[dict]) -> list[dict]:
    """One entry per case: ``<method>_ratio`` (wall time over plain) and ``<method>_memory_ratio``."""
    cases = {}
    for r in rows:
        key = (r["model"], r["dtype"], r["prompt_tokens"], r["mode"], r["batch"], r.get("logit_scale", 1.0))
        entry = cases.setdefault(key, dict(zip(("model", "dtype", "prompt_tokens", "mode", "batch", "logit_scale"), key)))
        name = r["method"].replace("-", "_")
        entry[f"{name}_ratio"] = round(r["ratio_to_plain"], 3)
        entry[f"{name}_memory_ratio"] = round(r["memory_ratio"], 3)
    return list(cases.values())


def markdown(rows: list[dict]) -> str:
    head = ("| model | dtype | logit scale | data | prompt tokens | mode | batch | method | wall s | tokens/s | x plain "
            "| peak added MB | memory x plain |\n")
    head += "|---|---|---:|---|---:|---|---:|---|---:|---:|---:|---:|---:|\n"
    body = "".join(
        f"| {r['model']} | {r['dtype']} | {r.get('logit_scale', 1.0):g} | {r['data']} | {r['prompt_tokens']} | {r['mode']} "
        f"| {r['batch']} | {r['method']} | {r['wall_s']:.3f} | "
        f"{r['tokens_per_s']:.1f} | {r['ratio_to_plain']:.2f} | {r['peak_added_mb']:.0f} | {r['memory_ratio']:.2f} |\n"
        for r in rows
    )
    return head + body


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--doc-tokens", nargs="+", type=int, default=[None],
                        help="document lengths in tokens (default: the data set's mean)")
    parser.add_argument("--name", default="decode_speed", help="file name of the results (<name>.json, .md)")
    parser.add_argument("--models", nargs="+", default=["bart-base", "gpt2-small"])
    parser.add_argument("--datasets", nargs="+", default=["faithdial"], choices=list(MEAN_WORDS))
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    parser.add_argument("--batch-sizes", nargs="+", type=int, default=[1, 8])
    parser.add_argument("--methods", nargs="+", default=None, help="subset of methods (plain always runs)")
    parser.add_argument("--new-tokens", type=int, default=24)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--alpha", type=float, default=0.5)
    parser.add_argument("--p", type=float, default=0.9)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("--logit-scales", nargs="+", type=float, default=[1.0],
                        help="random models only: output layer multiplied by each (1 = as initialised, "
                             "near-flat); benchmarks/nucleus_sizes.py shows which scale matches a trained model")
    parser.add_argument("--output-dir", default="benchmarks/results")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    import transformers

    meta = {"device": args.device, "torch": torch.__version__, "transformers": transformers.__version__,
            "threads": torch.get_num_threads(), "args": vars(args)}
    if args.device.startswith("cuda"):
        meta["gpu"] = torch.cuda.get_device_name(args.device)
    rows = []
    for model_name in args.models:
        for scale in args.logit_scales if model_name != "embedded" else [1.0]:
            model = random_weight_model(model_name, args.device, logit_scale=scale, dtype=args.dtype)
            for dataset in args.datasets:
                for doc_tokens in args.doc_tokens:
                    for mode in args.modes:
                        for batch in args.batch_sizes:
                            case = [dict(row, logit_scale=scale)
                                    for row in run_case(model, model_name, dataset, mode, batch, args, doc_tokens)]
                            rows.extend(case)
                            print(markdown(case), flush=True)
                            # written after every case, so a run stopped part-way keeps what it measured
                            save_results(args.output_dir, args.name, dict(meta, summary=summary(rows)), rows,
                                         markdown(rows), quiet=True)
            del model
    save_results(args.output_dir, args.name, dict(meta, summary=summary(rows)), rows, markdown(rows))


if __name__ == "__main__":
    main()
