"""Every option that changes the decoded text, declared once: :class:`DecodeConfig`.

Each field states its library default and, in its metadata, everything else that follows from it:
its command-line flag (parser, help text, the commands' default where it differs), how it is
checked, and how it is written into the settings stored with every output record (and compared
when a run resumes). ``pmi-decode generate`` and ``demo``, :func:`~pmi_decode.batch.decode.decode_records`,
sharded runs, sweeps and staged comparisons all build or receive one ``DecodeConfig``, so a new
option is a new field here and nothing else: its flag, its setting, its place in a sweep's
``decode_options`` and in a comparison system come from the field.

Metadata keys a field may set (all optional; :func:`option` writes them):

- ``help``: the flag's help text; ``{default}`` is replaced by the command's default (``on`` /
  ``off`` for a switch).
- ``flag``: the flag (default: ``--`` and the name with dashes).
- ``parse``: ``parse(flag)`` returns argparse's ``type`` for the flag's value.
- ``choices``: ``{"word on the command line": value}``, for a flag that takes one of a few words.
- ``action``: ``"switch"`` (``--x`` / ``--no-x``, the default for a true/false field),
  ``"store_true"``, or ``"store_false"`` (the flag turns the option off).
- ``cli_default``: the commands' default when it differs from the library's (a value, or a
  function read when the parser or config is built).
- ``commands``: the commands whose parser has the flag (default: generate and demo).
- ``help_rank``: where the flag stands in ``--help`` (flags without one follow, in field order).
- ``check``: ``check(name, value)`` raises ``ValueError`` for a bad value.
- ``setting``: ``write(value, config)`` gives the value stored in settings, or :data:`OMIT` to
  leave the key out; without it the value is stored as it is when it differs from the default,
  so files decoded before the option existed still resume.
- ``setting_key``: the settings key, when it is not the field's name.
- ``code_only``: set from Python only (no flag, not a key of YAML configs).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
from dataclasses import dataclass, field, fields
from numbers import Real
from typing import Callable, Mapping

from . import defaults as _defaults
from .adaptive import alpha_setting, parse_alpha, resolve_alpha
from .validation import validate_alpha_p, validate_alpha_with_cap, validate_plausibility, validate_pmi_cap

__all__ = ["DecodeConfig", "OMIT", "option", "positive_int", "int_at_least", "unit_interval"]

GENERATE, DEMO = "generate", "demo"
#: A settings writer's answer for "leave this key out".
OMIT = object()


# ---------------------------------------------------------------------------- flag values
def unit_interval(flag: str, *, open_left: bool) -> Callable[[str], float]:
    """A number in [0, 1] (``open_left``: (0, 1]); the error names the flag."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag} must be a number, got {text!r}") from None
        low_ok = value > 0.0 if open_left else value >= 0.0
        if not (low_ok and value <= 1.0):
            raise argparse.ArgumentTypeError(f"{flag} must be in {'(0, 1]' if open_left else '[0, 1]'}, got {text}")
        return value

    return parse


def int_at_least(flag: str, low: int, note: str = "") -> Callable[[str], int]:
    """An integer >= ``low``; the error names the flag (``note`` says what ``low`` means)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag} must be an integer, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"{flag} must be >= {low}{note}, got {value}")
        return value

    return parse


def positive_int(flag: str) -> Callable[[str], int]:
    return int_at_least(flag, 1)


def _non_negative_int(flag: str) -> Callable[[str], int]:
    return int_at_least(flag, 0, " (0 = off)")


def _positive_float(flag: str) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag} must be a number, got {text!r}") from None
        if not value > 0:
            raise argparse.ArgumentTypeError(f"{flag} must be > 0 (1 = off), got {text}")
        return value

    return parse


def _alpha_flag(flag: str) -> Callable[[str], float | str]:
    """A number in [0, 1], adaptive[:MAX_ALPHA[:EXPONENT[:CEILING]]] or cocoa[:MAX_ALPHA[:EXPONENT[:CEILING]]]."""
    number = unit_interval(flag, open_left=False)

    def parse(text: str):
        if text.strip().lower().startswith(("adaptive", "cocoa")):
            try:
                return parse_alpha(text).spec
            except ValueError as err:
                raise argparse.ArgumentTypeError(str(err)) from None
        return number(text)

    return parse


def _plausibility_flag(flag: str) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            return validate_plausibility(float(text))
        except ValueError as err:
            raise argparse.ArgumentTypeError(f"{flag}: {err}") from None

    return parse


def _pmi_cap_flag(flag: str) -> Callable[[str], float | None]:
    def parse(text: str) -> float | None:
        if text.strip().lower() in ("none", "off", "inf"):
            return None
        try:
            return validate_pmi_cap(float(text))
        except ValueError as err:
            raise argparse.ArgumentTypeError(f"{flag}: {err}") from None

    return parse


def _integer(flag: str) -> Callable[[str], int]:
    return int


# ---------------------------------------------------------------------------- checks
def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_alpha(name, value) -> None:
    resolve_alpha(value, 1.0)  # a number in [0, 1] or an adaptive rule; the message says which part is wrong


def _check_p(name, value) -> None:
    validate_alpha_p(0.0, value)


def _check_plausibility(name, value) -> None:
    validate_plausibility(value)


def _check_pmi_cap(name, value) -> None:
    validate_pmi_cap(value)


def _check_at_least_one(name, value) -> None:
    if not _is_int(value) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")


def _check_limit(name, value) -> None:
    if value is not None and (not _is_int(value) or value < 1):
        raise ValueError(f"{name} must be an integer >= 1 or None (no limit), got {value!r}")


def _check_ngram(name, value) -> None:
    if value is not None and (not _is_int(value) or value < 0):
        raise ValueError(f"{name} must be an integer >= 0 (0 = off), got {value!r}")


def _check_penalty(name, value) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, Real) or not value > 0):
        raise ValueError(f"{name} must be a number > 0 (1 = off), got {value!r}")


def _check_true_or_false(name, value) -> None:
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be true or false, got {value!r}")


def _check_seed(name, value) -> None:
    if value is not None and not _is_int(value):
        raise ValueError(f"{name} must be an integer or None, got {value!r}")


def _check_chat_template(name, value) -> None:
    if value is not None and not isinstance(value, bool):
        raise ValueError(f"{name} must be true, false or None (auto: when a decoder-only model has one), "
                         f"got {value!r}")


def _check_packed(name, value) -> None:
    if value is not None and not isinstance(value, bool):
        raise ValueError(f"{name} must be true, false or None (auto: where the model and options can take it), "
                         f"got {value!r}")


def _check_final_choice(name, value) -> None:
    if value not in ("pmi", "model"):
        raise ValueError(f"{name} must be 'model' or 'pmi', got {value!r}")


# ---------------------------------------------------------------------------- settings writers
def _as(convert) -> Callable:
    """Always written, converted (``None`` stays ``None``)."""
    return lambda value, config: None if value is None else convert(value)


def _as_is(value, config):
    """Always written, as it is."""
    return value


def _when_on(write=lambda value: value) -> Callable:
    """Written only when set (true, or a non-zero number), so files decoded without it still resume."""
    return lambda value, config: write(value) if value else OMIT


def _penalty_setting(value, config):
    return float(value) if value is not None and float(value) != 1.0 else OMIT


def _prefer_finished_setting(value, config):
    return True if value and int(config.num_beams) > 1 else OMIT  # one beam has nothing to prefer


def _final_choice_setting(value, config):
    # written only where it changes something, so files decoded before the option existed still resume
    return value if value != "pmi" and int(config.num_beams) > 1 else OMIT


def _line_break_setting(value, config):
    # written only when not off, so files decoded before the option existed still resume
    return OMIT if value is False else ("auto" if value is None else True)


def _packed_setting(value, config):
    # only "on" is written: auto and off decode the same tokens (as a change of device does, which is not
    # written either), and files decoded before the option existed still resume
    return True if value is True else OMIT


def _format_setting(value, config):
    if value is None:
        return OMIT
    return dataclasses.asdict(value) if dataclasses.is_dataclass(value) else repr(value)


def option(default, *, help: str = "", check=None, parse=None, flag: str | None = None, action: str | None = None,
           cli_default=dataclasses.MISSING, commands=(GENERATE, DEMO), help_rank: int | None = None, setting=None,
           setting_key: str | None = None, code_only: bool = False):
    """A :class:`DecodeConfig` field with its metadata (see the module docstring). ``parse`` may
    also be a mapping: the words the flag takes, to their values (``choices``). A true/false
    field gets a ``--x`` / ``--no-x`` switch and the true-or-false check unless told otherwise."""
    choices = dict(parse) if isinstance(parse, Mapping) else None
    if isinstance(default, bool):
        action = action or ("choices" if choices else "switch")
        check = check or _check_true_or_false
    metadata = {"help": help, "flag": flag, "parse": None if choices else parse, "action": action, "choices": choices,
                "commands": () if code_only else tuple(commands), "help_rank": help_rank, "check": check,
                "setting": setting, "setting_key": setting_key, "code_only": code_only}
    if cli_default is not dataclasses.MISSING:
        metadata["cli_default"] = cli_default
    return field(default=default, metadata=metadata)


_LAYOUT_GUARD = "markers+line_start+control_tokens"
#: the response n-gram guard's current meaning, stored after n: n-grams holding a number part do not count
#: (files decoded when they did store n alone and do not resume under it)
_NGRAM_RULE = "+numbers_exempt"


@dataclass(frozen=True)
class DecodeConfig:
    """What a decode writes, as far as the options go: the PMI-Decode objective, the search, the
    prompt, the guards and the end rule. The field defaults are the library's (what
    :func:`~pmi_decode.batch.decode.decode_records` does when told nothing);
    :meth:`cli_defaults` gives the commands' (``pmi-decode generate`` runs the guards and the end
    rule; docs/decoding.md, "Defaults at a glance", says why).

    Fields are in the order their keys have in the stored settings. Values are checked once,
    when the config is made, with messages that name the option.
    """

    alpha: float | str = option(
        0.5, parse=_alpha_flag, check=_check_alpha, cli_default=lambda: _defaults.ALPHA, help_rank=10,
        setting=lambda value, config: alpha_setting(value),
        help="weight of the PMI term in [0, 1]; 0 is plain decoding; 'adaptive[:MAX_ALPHA[:EXPONENT]]' sets it "
        "per token from how much the document changes the next-token distribution (AdaCAD's signal); "
        "'cocoa[:MAX_ALPHA[:EXPONENT]]' also lowers it where the model reading the document is already decided "
        "(CoCoA's signals); a fourth number caps the weight (e.g. cocoa:1:0.5:0.25) (default {default})")
    p: float = option(
        0.9, parse=lambda flag: unit_interval(flag, open_left=True), check=_check_p, cli_default=lambda: _defaults.P,
        help_rank=20, setting=_as(float),
        help="top-p nucleus of P(.|d,h) the candidates come from, in (0, 1] (default {default})")
    num_beams: int = option(
        4, parse=positive_int, check=_check_at_least_one, help_rank=40, setting=_as(int),
        help="beam width; 1 is greedy search (default {default})")
    do_sample: bool = option(
        False, action="store_true", commands=(GENERATE,), help_rank=190, setting=_as(bool),
        help="sample instead of searching (seeded by --seed)")
    max_new_tokens: int = option(
        64, parse=positive_int, check=_check_at_least_one, help_rank=50, setting=_as(int),
        help="longest response in tokens (default {default})")
    seed: int | None = option(
        0, parse=_integer, check=_check_seed, commands=(GENERATE,), help_rank=210, setting=_as_is,
        help="random seed (default {default})")
    #: it decides which dialogues share a batch, hence the padding and, when sampling, each batch's seed
    batch_size: int = option(
        8, parse=positive_int, check=_check_at_least_one, commands=(GENERATE,), help_rank=200, setting=_as(int),
        help="dialogues per batch, grouped by length (default {default})")
    max_length: int | None = option(
        None, flag="--max-input-length", parse=positive_int, check=_check_limit, help_rank=70, setting=_as(int),
        setting_key="max_input_length",
        help="cut prompts to this many tokens, document first (default: the model's context)")
    max_history_turns: int | None = option(
        None, parse=positive_int, check=_check_limit, help_rank=80, setting=_as(int),
        help="keep only the last N history turns")
    chat_template: bool | None = option(
        None, parse={"auto": None, "on": True, "off": False}, check=_check_chat_template, help_rank=60, setting=_as_is,
        help="wrap dialogues in the tokenizer's chat template (auto: when a decoder-only model has one)")
    no_repeat_ngram_size: int | None = option(
        None, parse=_non_negative_int, check=_check_ngram, cli_default=0, help_rank=90, setting=_when_on(int),
        help="never repeat a token n-gram of this size (generate's option; on decoder-only models it also "
        "forbids repeating n-grams of the prompt, i.e. quoting the document); 0 = off (default {default})")
    repetition_penalty: float | None = option(
        None, parse=_positive_float, check=_check_penalty, cli_default=1.0, help_rank=110, setting=_penalty_setting,
        help="generate's repetition penalty; 1 = off (default 1)")
    #: the guard's current meaning is stored (markers, and their words at a line start; decoder-only
    #: models: the control tokens too): files decoded under an earlier guard say True or
    #: "markers+control_tokens" and do not resume under it
    block_layout_markers: bool = option(
        False, flag="--allow-layout-markers", action="store_false", cli_default=True, help_rank=180,
        setting=_when_on(lambda value: _LAYOUT_GUARD),
        help='let responses contain the prompt layout\'s markers ("Document:", "User:", "Agent:"), '
        "which are banned by default")
    response_no_repeat_ngram_size: int | None = option(
        None, parse=_non_negative_int, check=_check_ngram, cli_default=3, help_rank=100,
        setting=_when_on(lambda value: f"{int(value)}{_NGRAM_RULE}"),
        help="never repeat a token n-gram of this size within the response (the document may still be "
        "quoted; n-grams holding a digit do not count, so numbers keep their digits); 0 = off (default {default})")
    normalize_scores: bool = option(
        False, action="store_true", help_rank=120, setting=_when_on(),
        help="normalise PMI-Decode's step scores over the nucleus (log-softmax): same tokens in greedy search "
        "and sampling; in beam search hypotheses are ranked by the PMI-reweighted distribution, whose beams "
        "end as plain decoding's do (raw PMI scores can be positive, which keeps beams going)")
    conditional_end: bool = option(
        False, cli_default=True, help_rank=150, setting=_when_on(),
        help="let the model with the document alone decide when a response ends: the end token keeps its "
        "conditional probability and PMI shares the rest among the other tokens. Without it the document's "
        "words outbid the end token and beam-search responses run to --max-new-tokens (default: {default})")
    plausibility: float = option(
        0.0, parse=_plausibility_flag, check=_check_plausibility, cli_default=lambda: _defaults.PLAUSIBILITY,
        help_rank=30, setting=_when_on(float),
        help="PMI re-ranks only tokens at least this share as probable as the most probable token given the "
        "document, so it cannot promote a number or name from another sentence of the document; in [0, 1), "
        "0 is the paper's score (default {default})")
    pmi_cap: float | None = option(
        None, parse=_pmi_cap_flag, check=_check_pmi_cap, cli_default=lambda: _defaults.PMI_CAP,
        help_rank=35, setting=_when_on(float),
        help="the most the PMI term may count, in nats: every token the document makes at least e^CAP times "
        "likelier gains the same, and the model reading the document ranks them, so a number or name from "
        "another sentence of the document cannot outbid the answer; 'none' is the paper's score (default {default})")
    block_immediate_repeats: bool = option(
        False, cli_default=True, help_rank=130, setting=_when_on(),
        help='never repeat a word (or a span of up to 4 tokens starting a word) right away, as in "Blue Blue" '
        "(default: {default})")
    capitalize_sentences: bool = option(
        False, cli_default=True, help_rank=140, setting=_when_on(),
        help='never open a sentence after the first in lower case ("... others. on the other hand"); '
        'abbreviations such as "Inc." or "e.g." do not end a sentence (default: {default})')
    end_at_line_break: bool | None = option(
        False, parse={"auto": None, "on": True, "off": False}, check=_check_chat_template, cli_default=None,
        help_rank=165, setting=_line_break_setting,
        help="end a response at its first line break after some text: in the plain prompt layout a line is a "
        "turn, and a model without a chat template goes on after its answer with lines of its own; auto: only "
        "when no chat template is used (default {default})")
    keep_copied_numbers: bool = option(
        False, cli_default=True, help_rank=145, setting=_when_on(),
        help='where a response copies the prompt word for word up to a number, only the prompt\'s number may '
        'follow ("from 9 am to" goes on "8 pm" when the document says "from 9 am to 8 pm"), and a copied number '
        "goes on to its last digit; a response that is not copying is free (default: {default})")
    trim_unfinished: bool = option(
        False, help_rank=170, setting=_when_on(),
        help="when --max-new-tokens cuts a response mid-sentence, drop that unfinished sentence if a finished "
        "one precedes it; the record keeps the whole text as pmi_response_untrimmed (default: {default})")
    prefer_finished: bool = option(
        False, help_rank=160, setting=_prefer_finished_setting,
        help="beam search: return the best of the final beams that ended with the end token rather than a "
        "better-scored one that --max-new-tokens cut; the best beam when none ended (default: {default})")
    final_choice: str = option(
        "pmi", parse={"model": "model", "pmi": "pmi"}, check=_check_final_choice, cli_default=lambda: _defaults.FINAL_CHOICE,
        help_rank=37, setting=_final_choice_setting,
        help="beam search: which finished hypothesis to return. model: the one the model reading the document "
        "finds likeliest, as plain beam search ranks its own (PMI chooses the words, the model the response; "
        "PMI's own ranking favours responses that jump to any value of the document); pmi: the best by the "
        "summed PMI-Decode scores, the paper's (default {default})")
    packed: bool | None = option(
        None, parse={"auto": None, "on": True, "off": False}, check=_check_packed,
        help_rank=190, setting=_packed_setting,
        help="both halves of each dialogue in one row of the batch (decoder-only models), so the document-free "
        "half holds its own length in the KV cache, not the document's: the same tokens, less memory, faster "
        "on a CPU and on a GPU. auto: wherever the model and options can take it; off: the paired path; "
        "on: refused, with the reason, where the model cannot (default {default})")
    #: the prompt layout (a :class:`~pmi_decode.inputs.DialogueFormat`; ``None``: the default one)
    format: object = option(None, code_only=True, setting=_format_setting)

    def __post_init__(self):
        for f in fields(self):
            check = f.metadata.get("check")
            if check is not None:
                check(f.name, getattr(self, f.name))
        alpha = resolve_alpha(self.alpha, 1.0)[0]
        validate_alpha_with_cap(alpha, validate_pmi_cap(self.pmi_cap))

    # ------------------------------------------------------------------ building one
    def replace(self, **changes) -> "DecodeConfig":
        """A copy with ``changes`` (checked like a new config)."""
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_options(cls, config: "DecodeConfig | None" = None, **options) -> "DecodeConfig":
        """``config`` (the defaults when ``None``) with ``options`` (field values) applied."""
        if config is None:
            return cls(**options)
        return config.replace(**options) if options else config

    @classmethod
    def option_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))

    @classmethod
    def options_in(cls, mapping: Mapping) -> dict:
        """The items of ``mapping`` (a YAML config, say) that are options of this config."""
        names = set(cls.option_names())
        return {key: value for key, value in mapping.items() if key in names}

    @classmethod
    def file_option_names(cls) -> tuple[str, ...]:
        """The options a YAML config may set (all but those set from Python only)."""
        return tuple(f.name for f in fields(cls) if not f.metadata.get("code_only"))

    @classmethod
    def cli_defaults(cls) -> "DecodeConfig":
        """The config the commands decode with when given no flag (read now: the shared defaults
        of :mod:`pmi_decode.defaults` may be changed at run time, as the tests do)."""
        values = {}
        for f in fields(cls):
            if "cli_default" in f.metadata:
                default = f.metadata["cli_default"]
                values[f.name] = default() if callable(default) else default
        return cls(**values)

    # ------------------------------------------------------------------ the command line
    @classmethod
    def _flag_fields(cls, command: str) -> list:
        order = {f.name: i for i, f in enumerate(fields(cls))}
        chosen = [f for f in fields(cls) if command in f.metadata.get("commands", (GENERATE, DEMO))]
        return sorted(chosen, key=lambda f: (f.metadata.get("help_rank") is None,
                                             f.metadata.get("help_rank") or 0, order[f.name]))

    @staticmethod
    def _flag(f) -> str:
        return f.metadata.get("flag") or "--" + f.name.replace("_", "-")

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser, command: str = GENERATE,
                      defaults: "DecodeConfig | None" = None) -> None:
        """Add a flag for every option ``command`` takes; ``defaults``: the command's defaults
        (:meth:`cli_defaults` unless given). :meth:`from_args` reads them back."""
        defaults = cls.cli_defaults() if defaults is None else defaults
        for f in cls._flag_fields(command):
            meta, flag, default = f.metadata, cls._flag(f), getattr(defaults, f.name)
            shown = ("on" if default else "off") if isinstance(default, bool) else default
            if meta.get("choices"):  # the word the flag takes for the default ("auto", not None)
                shown = {value: word for word, value in meta["choices"].items()}[default]
            kwargs = {"dest": f.name, "help": (meta.get("help") or "").format(default=shown)}
            action = meta.get("action") or ("switch" if isinstance(f.default, bool) else None)
            if action == "switch":
                kwargs.update(action=argparse.BooleanOptionalAction, default=default)
            elif action in ("store_true", "store_false"):
                if default is not (action == "store_false"):
                    raise ValueError(f"{flag}: a {action} flag needs the default {action == 'store_false'}")
                kwargs.update(action=action, default=default)
            elif meta.get("choices"):
                words = {value: word for word, value in meta["choices"].items()}
                kwargs.update(choices=list(meta["choices"]), default=words[default])
            else:
                parse = meta.get("parse")
                kwargs.update(type=parse(flag) if parse else str, default=default,
                              metavar=flag.lstrip("-").replace("-", "_").upper())
            parser.add_argument(flag, **kwargs)

    @classmethod
    def from_args(cls, args: argparse.Namespace, **changes) -> "DecodeConfig":
        """The config a parsed command line asks for (options the command has no flag for keep
        the library default; ``changes`` win)."""
        values = {}
        for f in fields(cls):
            if f.metadata.get("code_only") or not hasattr(args, f.name):
                continue
            value = getattr(args, f.name)
            choices = f.metadata.get("choices")
            values[f.name] = choices[value] if choices else value
        return cls(**{**values, **changes})

    # ------------------------------------------------------------------ what it does
    def settings(self, *, compare: bool = False, model_name=None, **extra) -> dict:
        """The settings stored with every output record and compared on resume: every option
        that can change a record's content, as it reads back from the file. ``compare`` (plain
        decoding written beside) and ``model_name`` come from the run; ``extra``: further
        content-changing values the caller applied (e.g. the model's dtype), stored as given."""
        settings = {}
        for f in fields(self):
            value = getattr(self, f.name)
            write = f.metadata.get("setting")
            written = write(value, self) if write is not None else (value if value != f.default else OMIT)
            if written is not OMIT:
                settings[f.metadata.get("setting_key") or f.name] = written
            if f.name == "seed":  # where output files have always had it
                settings["compare"] = bool(compare)
        settings.update(extra)
        if model_name is not None:
            settings = {"model": str(model_name), **settings}
        return json.loads(json.dumps(settings, default=str))  # as it will read back from the file (tuples -> lists)

    def processor_options(self) -> dict:
        """The options of :func:`~pmi_decode.pmi_generate` / :class:`~pmi_decode.PMIDecode`."""
        alpha, p = resolve_alpha(self.alpha, self.p)
        return dict(alpha=alpha, p=p, normalize=self.normalize_scores, conditional_end=self.conditional_end,
                    plausibility=float(self.plausibility),
                    pmi_cap=math.inf if self.pmi_cap is None else float(self.pmi_cap), packed=self.packed,
                    final_choice=self.final_choice)

    @property
    def hypotheses_per_dialogue(self) -> int:
        """How many ranked hypotheses ``generate`` returns per dialogue: all the beams to pick
        from with ``prefer_finished`` (the search itself is the same), else one."""
        return self.num_beams if self.prefer_finished else 1

    def generate_kwargs(self, model, tokenizer) -> dict:
        """``generate``'s keyword arguments for these options, guards that need no prompt width
        included (as ``logits_processor``); :meth:`response_guards` adds the others per batch."""
        from .inputs import pad_token_id

        kwargs = dict(max_new_tokens=self.max_new_tokens, num_beams=self.num_beams, do_sample=self.do_sample,
                      num_return_sequences=self.hypotheses_per_dialogue, pad_token_id=pad_token_id(tokenizer))
        if self.do_sample:
            kwargs["top_p"] = 1.0  # PMIDecode already keeps only the top-p nucleus
        if self.no_repeat_ngram_size:
            kwargs["no_repeat_ngram_size"] = self.no_repeat_ngram_size
        if self.repetition_penalty is not None and float(self.repetition_penalty) != 1.0:
            kwargs["repetition_penalty"] = float(self.repetition_penalty)
        if self.block_layout_markers:
            from .guards import layout_guards

            kwargs["logits_processor"] = layout_guards(tokenizer, model, self.format)
        return kwargs

    def ends_at_line_break(self, tokenizer, is_encoder_decoder: bool) -> bool:
        """``end_at_line_break`` resolved: ``None`` (auto) is on when no chat template is used."""
        if self.end_at_line_break is None:
            from .inputs import use_chat_template_for

            return not use_chat_template_for(tokenizer, is_encoder_decoder, self.chat_template)
        return bool(self.end_at_line_break)

    def response_guards(self, tokenizer, model=None) -> Callable[..., list]:
        """``guards(response_start, sources=None)``: the guards that read the response, for a
        batch whose responses start at ``response_start`` in the decoder's ``input_ids``;
        ``sources``, each dialogue's prompt as token ids without padding, is what
        ``keep_copied_numbers`` compares the response with (needed when it is on). Made once per
        run (the sentence-case guard reads the vocabulary once). ``model``: where the end token
        and the architecture come from (needed for ``end_at_line_break``)."""
        from .copied_numbers import CopiedNumberGuard
        from .guards import EndAtLineBreak, ResponseNoImmediateRepeat, ResponseNoRepeatNGram, SentenceCaseGuard

        sentence_case = SentenceCaseGuard(tokenizer, 0).for_width if self.capitalize_sentences else None
        line_break = None
        if self.end_at_line_break is not False:
            if model is None:
                raise ValueError("end_at_line_break needs the model (its end token): response_guards(tokenizer, model)")
            enc_dec = bool(getattr(model.config, "is_encoder_decoder", False))
            if self.ends_at_line_break(tokenizer, enc_dec):
                eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
                eos = tokenizer.eos_token_id if eos is None else eos
                if eos is None:
                    raise ValueError("end_at_line_break needs an end token, and neither the model's generation "
                                     "config nor the tokenizer names one")
                line_break = EndAtLineBreak(tokenizer, 0, eos).at  # reads the vocabulary once

        def guards(response_start: int, sources=None) -> list:
            out = []
            if self.keep_copied_numbers:
                if sources is None:
                    raise ValueError("keep_copied_numbers needs each dialogue's prompt: guards(response_start, sources)")
                out.append(CopiedNumberGuard(tokenizer, response_start, sources))
            if self.response_no_repeat_ngram_size:
                out.append(ResponseNoRepeatNGram(self.response_no_repeat_ngram_size, response_start, tokenizer))
            if self.block_immediate_repeats:
                out.append(ResponseNoImmediateRepeat(tokenizer, response_start))
            if sentence_case is not None:
                out.append(sentence_case(response_start))
            if line_break is not None:
                out.append(line_break(response_start))
            return out

        return guards
