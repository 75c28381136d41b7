"""A speed-up timed against the same code with it switched off, plain decoding in the same process.

Each switch names one change of the library's and how to turn it off for one call, so the two
differ in nothing else; runs interleaved, median of ``--repeats`` after a warm-up each, the
tokens of both compared, and on CUDA the peak memory each call adds over what was allocated
before it (measured in the warm-up; ``*_memory_ratio`` against plain decoding).

- ``generated-reorder``: beam search on the packed path moves only the positions generated so far
  (``pmi_decode.packed.generated_positions_reorder``), since each prompt's rows share their prompt
  positions; ``whole`` is transformers' own whole-cache reorder.
- ``cross-attention-bias``: an encoder-decoder model's paired path hands the decoder its padding
  mask as a bias built once per call (``pmi_decode.generation.CrossAttentionBias``); ``mask`` is the
  2-D mask that transformers turns into a mask at every step.
- ``step-graph``: the paired and packed steps' scoring recorded once as a CUDA graph and replayed
  (``pmi_decode.step_graph``, on for CUDA since GPU pass 10); ``eager`` runs every kernel from
  the host.
- ``step-graph-large``: the same graph for steps above ``step_graph.MAX_ELEMENTS`` (which run
  eagerly as shipped); time and memory tell whether the limit should move.
- ``buffered-cache``: the packed path's cache writes each step into buffers that grow in chunks
  (``pmi_decode.packed.buffered_update``; on for the CPU); ``concatenated`` is transformers'
  ``torch.cat`` of the whole cache at every step, after the step's keys and values are made
  contiguous (``contiguous_update``).
- ``shared-positions``: beam search's rows of one prompt share its positions in the packed path's
  cache (``pmi_decode.shared_positions``; on for the CPU); ``per-row`` holds them in every row,
  as transformers' cache does.
- ``cross-attention-once``: an encoder-decoder model's beam search on the paired path holds the
  cross-attention part of its cache once per prompt after the first step
  (``pmi_decode.cross_attention_cache``; on for the CPU); ``per-row`` keeps it in every row.
- ``additive-mask``: the packed step hands attention its mask as the additive float mask, made
  once per step (``pmi_decode.packed.additive_mask_step``); ``boolean`` leaves torch to convert the
  boolean mask in every layer.
- ``final-choice``: beam search records each hypothesis's conditional log-prob for the model's
  final choice (``pmi_decode.final_choice.HypothesisScores``, the default); ``pmi`` records nothing
  and returns beam search's own best. The cost of the record: the tokens may differ by design.

    python benchmarks/switch_ab.py --switch generated-reorder --model embedded --batch 1 --output-dir DIR   (CPU)
    python benchmarks/switch_ab.py --switch cross-attention-bias --model bart-base --device cuda --beams 1 --output-dir DIR
    python benchmarks/switch_ab.py --switch step-graph --model gpt2-small --device cuda --beams 1 --output-dir DIR
    python benchmarks/switch_ab.py --switch shared-positions --model embedded --batch 4 --cpu-memory --output-dir DIR

On the CPU, ``--cpu-memory`` adds the peak resident memory each call adds (the kernel's high-water
mark, reset before the call), each of the three runs alone in a fresh process; it moves between
runs with the C library's reuse of freed memory. ``--cpu-allocated`` adds the peak of the bytes
PyTorch's CPU allocator holds during each call, over what it held before (``torch.profiler``'s memory
events): the same number at every run, the tensors alone. A change of the library is measured by
this script over each checkout's package (``PYTHONPATH``), plain decoding's number the check that
the two runs compare. ``--defaults-of cuda`` runs the CPU with the choices the library makes
for CUDA (which speed-ups are on: ``pmi_decode.device_choices``), so that ``--cpu-allocated`` measures
the peak memory of a GPU's path on the CPU: the tensors a call holds are the same on either device,
save the attention kernels' own workspace.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from unittest import mock

import torch

import pmi_decode.cross_attention_cache
import pmi_decode.defaults
import pmi_decode.generation
import pmi_decode.packed
import pmi_decode.step_graph
from pmi_decode import pmi_generate
from pmi_decode.device_choices import BY_DEVICE, on_for
from pmi_decode.experiments.benchmarking import random_dialogue_inputs, random_weight_model

# switch: (name with it on, name with it off, pmi_generate's options, (module, attribute, value when off),
#          (module, attribute, value when on) or None where the library ships it on)
SWITCHES = {
    "generated-reorder": ("generated", "whole", dict(packed=True),
                          (pmi_decode.packed, "generated_positions_reorder", lambda *a, **k: None), None),
    "cross-attention-bias": ("bias", "mask", dict(),
                             (pmi_decode.generation, "ADDITIVE_MASK_MODEL_TYPES", ()), None),
    "step-graph": ("graph", "eager", dict(),
                   (pmi_decode.step_graph, "GRAPHED_ON", ()), None),
    "step-graph-large": ("graph", "eager", dict(), None, (pmi_decode.step_graph, "MAX_ELEMENTS", 1 << 26)),
    "buffered-cache": ("buffered", "concatenated", dict(packed=True), (pmi_decode.packed, "BUFFERED_ON", ()),
                       (pmi_decode.packed, "BUFFERED_ON", ("cpu", "cuda"))),
    "shared-positions": ("shared", "per-row", dict(packed=True), (pmi_decode.packed, "SHARED_ON", ()),
                         (pmi_decode.packed, "SHARED_ON", ("cpu", "cuda"))),
    "cross-attention-once": ("once", "per-row", dict(), (pmi_decode.cross_attention_cache, "HELD_ONCE_ON", ()),
                             (pmi_decode.cross_attention_cache, "HELD_ONCE_ON", ("cpu", "cuda"))),
    "additive-mask": ("additive", "boolean", dict(packed=True),
                      (pmi_decode.packed, "additive_mask_step", lambda original: original), None),
    "final-choice": ("model", "pmi", dict(),
                     (pmi_decode.defaults, "FINAL_CHOICE", "pmi"), None),
}


def defaults_of(device_type: str, run_on: str) -> contextlib.ExitStack:
    """Patches that make the library's speed-ups by device type (``pmi_decode.device_choices``)
    choose for ``run_on`` (a device type) what they choose for ``device_type``; the switch under
    test is patched on top of them. The step's CUDA graph stays as ``run_on`` has it: it records
    on CUDA alone."""
    stack = contextlib.ExitStack()
    for name, (module, attribute) in BY_DEVICE.items():
        if name != "step_graph":
            chosen = (run_on,) if device_type in getattr(module, attribute) else ()
            stack.enter_context(mock.patch.object(module, attribute, chosen))
    return stack


def main(argv=None, switch: str | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--switch", choices=list(SWITCHES), default=switch, required=switch is None)
    parser.add_argument("--model", default="embedded")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--beams", type=int, default=4, help="1: greedy search")
    parser.add_argument("--new-tokens", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=5,
                        help="timed runs of each; 0 with --cpu-allocated: the memory alone (one run of each)")
    parser.add_argument("--doc-tokens", type=int, default=None,
                        help="the longest row's document length in tokens (default: Topical-Chat's mean)")
    parser.add_argument("--output-dir", required=True)
    parser.add_argument("--cpu-memory", action="store_true",
                        help="on the CPU, also the peak resident memory each call adds, each run alone in a fresh process")
    parser.add_argument("--cpu-allocated", action="store_true",
                        help="on the CPU, also the peak of the bytes PyTorch's allocator holds during each call")
    parser.add_argument("--defaults-of", metavar="DEVICE_TYPE",
                        help="run with the speed-ups the library turns on for this device type (e.g. cuda on a CPU)")
    parser.add_argument("--only", nargs="+", choices=["plain", "on", "off"],
                        help="with --repeats 0: measure these runs alone (the others' memory is another run's)")
    parser.add_argument("--memory-of", choices=["plain", "on", "off"], help=argparse.SUPPRESS)  # a fresh process's run
    args = parser.parse_args(argv)
    if args.repeats < 1 and not (args.cpu_allocated and not args.device.startswith("cuda")):
        parser.error("--repeats must be 1 or more, unless --cpu-allocated measures the memory alone on the CPU")
    if args.only and (args.repeats or args.cpu_memory):
        parser.error("--only needs --repeats 0 and --cpu-allocated alone: a timed comparison runs all three")
    if args.defaults_of is not None:
        try:
            args.defaults_of = torch.device(args.defaults_of).type
        except RuntimeError:
            parser.error(f"--defaults-of {args.defaults_of!r} is not a device type torch knows (e.g. cpu, cuda)")
    if args.defaults_of is None:
        return _main(args, argv)
    with defaults_of(args.defaults_of, torch.device(args.device).type):
        return _main(args, argv)


def _main(args, argv) -> None:
    on, off, options, off_patch, on_patch = SWITCHES[args.switch]
    model = random_weight_model(args.model, args.device, dtype=args.dtype)
    inputs = random_dialogue_inputs(model, "topicalchat", args.batch, args.device, doc_tokens=args.doc_tokens)
    kwargs = dict(max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens, num_beams=args.beams)

    def switched(patch):
        if patch is None:
            return pmi_generate(model, inputs, **options, **kwargs)
        with mock.patch.object(*patch):
            return pmi_generate(model, inputs, **options, **kwargs)

    runs = {"plain": lambda: model.generate(**inputs["conditional"], **kwargs),
            on: lambda: switched(on_patch),
            off: lambda: switched(off_patch)}
    if args.only:
        runs = {name: fn for (name, fn), which in zip(runs.items(), ("plain", "on", "off")) if which in args.only}

    cuda = args.device.startswith("cuda")
    if args.memory_of:
        run = runs[{"plain": "plain", "on": on, "off": off}[args.memory_of]]
        print(json.dumps({"peak_added_mb": _resident_peak_added_mb(run)}))
        return

    def sync():
        if cuda:
            torch.cuda.synchronize()

    times = {name: [] for name in runs}
    outputs, peak = {}, {name: None for name in runs}
    with torch.no_grad():
        for name, fn in runs.items() if args.repeats else ():  # the warm-up: tokens, and on CUDA the peak memory the call adds
            torch.manual_seed(0)
            sync()
            if cuda:
                torch.cuda.reset_peak_memory_stats()
                base = torch.cuda.memory_allocated()
            outputs[name] = fn()
            sync()
            peak[name] = (torch.cuda.max_memory_allocated() - base) / 2**20 if cuda else None
        for repeat in range(args.repeats):
            for name, fn in runs.items():
                torch.manual_seed(0)
                sync()
                start = time.perf_counter()
                fn()
                sync()
                times[name].append(time.perf_counter() - start)
            print(f"repeat {repeat + 1}: " + ", ".join(f"{k} {v[-1]:.3f} s" for k, v in times.items()), flush=True)
    median = {name: statistics.median(v) for name, v in times.items() if v}
    if args.cpu_allocated and not cuda:
        allocated = {}
        for name, fn in runs.items():
            allocated[name], outputs[name] = _allocated_peak_mb(fn)
    result = {
        "meta": {"args": vars(args), "torch": torch.__version__, "threads": torch.get_num_threads(),
                 "prompt_tokens": int(inputs["conditional"]["input_ids"].shape[1]),
                 "device_choices": on_for(torch.device(args.device).type),
                 "gpu": torch.cuda.get_device_name() if args.device.startswith("cuda") else None},
        "wall_s": median, "all_wall_s": times,
        **({f"{on}_ratio": median[on] / median["plain"], f"{off}_ratio": median[off] / median["plain"]}
           if median else {}),
        "same_tokens": bool(torch.equal(outputs[on], outputs[off])) if on in outputs and off in outputs else None,
        "peak_added_mb": peak,
    }
    if args.cpu_memory and not cuda:
        peak = {name: _in_fresh_process(argv, which) for name, which in (("plain", "plain"), (on, "on"), (off, "off"))}
        result["peak_added_mb"] = peak
        result["meta"]["memory"] = "peak resident memory added by the call (VmHWM), each run alone in a fresh process"
    if args.cpu_allocated and not cuda:
        result["peak_allocated_mb"] = allocated
        result.update({f"{name}_allocated_ratio": allocated[name] / max(allocated["plain"], 1e-9)
                       for name in (on, off) if name in allocated and "plain" in allocated})
    if cuda or args.cpu_memory:
        result.update({f"{on}_memory_ratio": peak[on] / max(peak["plain"], 1e-9),
                       f"{off}_memory_ratio": peak[off] / max(peak["plain"], 1e-9)})
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    name = f"{args.switch}_{args.model}_{args.dtype}_b{args.batch}_beam{args.beams}"
    if args.doc_tokens is not None:
        name += f"_doc{args.doc_tokens}"
    if args.defaults_of is not None:
        name += f"_as_{args.defaults_of}"
    if args.only:
        name += "_only_" + "_".join(args.only)
    (out / f"{name}.json").write_text(json.dumps(result, indent=1))
    print(json.dumps({k: v for k, v in result.items() if k not in ("meta", "all_wall_s")}, indent=1))


def _memory_status(field: str) -> int:
    """A field of /proc/self/status in kB (Linux)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}: --cpu-memory needs Linux")


def _resident_peak_added_mb(run) -> float:
    """The peak resident memory ``run`` adds over what the process held before it, in MiB. The
    kernel's high-water mark is reset first (``/proc/self/clear_refs``), so the model's loading
    does not count; meant for a fresh process, where no earlier call left freed memory behind
    for this one to reuse unseen."""
    gc.collect()
    Path("/proc/self/clear_refs").write_text("5")
    before = _memory_status("VmRSS")
    with torch.no_grad():
        torch.manual_seed(0)
        run()
    return (_memory_status("VmHWM") - before) / 1024


def _allocated_peak_mb(run) -> tuple[float, torch.Tensor]:
    """The peak of the bytes PyTorch's CPU allocator holds while ``run`` runs, over what it held
    when the call began, in MiB: the running sum of ``torch.profiler``'s memory events (each an
    allocation or a release, in bytes), read from the profiler's own records (a Chrome trace of a
    long call runs to gigabytes); and ``run``'s output."""
    gc.collect()
    with torch.no_grad(), torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                                 profile_memory=True) as prof:
        torch.manual_seed(0)
        output = run()
    events = sorted(((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events()
                     if e.name() == "[memory]" and e.device_type() == torch.autograd.DeviceType.CPU),
                    key=lambda event: event[0])
    if not events:
        raise RuntimeError("torch.profiler recorded no CPU memory events: --cpu-allocated cannot measure here")
    held = peak = 0
    for _, change in events:
        held += change
        peak = max(peak, held)
    return peak / 2**20, output


def _in_fresh_process(argv, which: str) -> float:
    """:func:`_resident_peak_added_mb` of one run (``plain``, ``on`` or ``off``), in a new process."""
    given = list(sys.argv[1:] if argv is None else argv)
    command = [sys.executable, str(Path(__file__).resolve()), *[a for a in given if a != "--cpu-memory"],
               "--memory-of", which]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return float(json.loads(done.stdout.strip().splitlines()[-1])["peak_added_mb"])


if __name__ == "__main__":
    main()
