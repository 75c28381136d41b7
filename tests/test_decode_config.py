"""DecodeConfig: the one declaration of the options that change the decoded text.

Its checks keep the messages decode_records gave; its settings are, key for key and in order,
what decode_settings wrote before it existed (so old output files resume); the commands' flags
are generated from it and read back into it; and a field added to it reaches the commands, the
settings, sweeps and comparisons with no other change. Also: no import circle among the modules
that use it, and the evaluation scripts import the installed package only.
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
from pathlib import Path

import pytest
from tiny_models import DIALOGUES, saved_tiny_model

import pmi_decode.batch.decode  # noqa: F401  (every user of DecodeConfig is loaded before the rebinding test)
import pmi_decode.batch.distributed  # noqa: F401
import pmi_decode.demo  # noqa: F401
from pmi_decode import defaults
from pmi_decode.adaptive import alpha_setting
from pmi_decode.batch.decode import decode_settings
from pmi_decode.cli import build_parser, main
from pmi_decode.decode_config import DecodeConfig, option
from pmi_decode.experiments import compare
from pmi_decode.experiments.sweep import Cell, SweepConfig, decode_option_names
from pmi_decode.inputs import DialogueFormat

ROOT = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------------------- checks
@pytest.mark.parametrize("changes, message", [
    ({"alpha": 1.5}, r"alpha must be a number in \[0, 1\], got 1.5"),
    ({"alpha": "adaptive:2"}, r"adaptive alpha: max_alpha must be a number in \(0, 1\], got 2.0"),
    ({"alpha": "0.5"}, r"alpha must be a number in \[0, 1\] or 'adaptive\|cocoa"),
    ({"p": 0}, r"p must be a number in \(0, 1\], got 0"),
    ({"alpha": "adaptive", "p": 1.5}, r"p must be a number in \(0, 1\], got 1.5"),
    ({"plausibility": 1.0}, r"plausibility must be a number in \[0, 1\) \(0 = off\), got 1.0"),
    ({"no_repeat_ngram_size": -1}, r"no_repeat_ngram_size must be an integer >= 0 \(0 = off\), got -1"),
    ({"response_no_repeat_ngram_size": True}, r"response_no_repeat_ngram_size must be an integer >= 0"),
    ({"repetition_penalty": 0}, r"repetition_penalty must be a number > 0 \(1 = off\), got 0"),
    ({"num_beams": 0}, "num_beams must be an integer >= 1, got 0"),
    ({"max_new_tokens": 1.5}, "max_new_tokens must be an integer >= 1, got 1.5"),
    ({"batch_size": True}, "batch_size must be an integer >= 1, got True"),
    ({"conditional_end": "yes"}, "conditional_end must be true or false, got 'yes'"),
    ({"do_sample": 1}, "do_sample must be true or false, got 1"),
    ({"max_length": 0}, "max_length must be an integer >= 1 or None"),
    ({"max_history_turns": "3"}, "max_history_turns must be an integer >= 1 or None"),
    ({"chat_template": "on"}, "chat_template must be true, false or None"),
    ({"seed": 1.0}, "seed must be an integer or None, got 1.0"),
])
def test_bad_values_are_refused_with_the_option_named(changes, message):
    with pytest.raises(ValueError, match=message):
        DecodeConfig(**changes)
    with pytest.raises(ValueError, match=message):
        DecodeConfig().replace(**changes)  # a copy is checked as a new config is


def test_good_values_are_kept_as_given():
    config = DecodeConfig(alpha="adaptive", p=1, repetition_penalty=2, plausibility=0, seed=None, chat_template=False)
    assert (config.alpha, config.p, config.repetition_penalty, config.seed) == ("adaptive", 1, 2, None)
    assert config.processor_options() == dict(alpha=config.processor_options()["alpha"], p=1.0, normalize=False,
                                              conditional_end=False, plausibility=0.0, pmi_cap=math.inf, packed=None,
                                              final_choice="pmi")
    assert alpha_setting(config.processor_options()["alpha"]) == "adaptive:1:0.5"


def test_decode_records_refuses_bad_options_with_the_same_messages():
    from tiny_models import tiny_model, tiny_tokenizer

    from pmi_decode.batch.decode import decode_records

    records = [{"id": "a", "document": DIALOGUES[0][0], "history": DIALOGUES[0][1]}]
    model, tok = tiny_model("llama"), tiny_tokenizer("llama")
    with pytest.raises(ValueError, match="num_beams must be an integer >= 1"):
        list(decode_records(records, model, tok, num_beams=0, progress=False))
    with pytest.raises(ValueError, match="plausibility must be a number"):
        list(decode_records(records, model, tok, DecodeConfig(), plausibility=2.0, progress=False))
    with pytest.raises(TypeError, match="temperature"):
        list(decode_records(records, model, tok, temperature=0.7, progress=False))


# ---------------------------------------------------------------------------- settings
def _settings_before_decode_config(*, alpha, p, num_beams, do_sample, max_new_tokens, seed, model_name=None,
                                   compare=False, batch_size=None, max_length=None, max_history_turns=None,
                                   chat_template=None, format=None, no_repeat_ngram_size=None,
                                   repetition_penalty=None, block_layout_markers=False,
                                   response_no_repeat_ngram_size=None, normalize_scores=False, conditional_end=False,
                                   block_immediate_repeats=False, trim_unfinished=False, prefer_finished=False,
                                   capitalize_sentences=False, plausibility=0.0, **options) -> dict:
    """decode_settings as it was before DecodeConfig, line for line: the files it wrote must resume."""
    settings = {
        "alpha": alpha_setting(alpha),
        "p": float(p),
        "num_beams": int(num_beams),
        "do_sample": bool(do_sample),
        "max_new_tokens": int(max_new_tokens),
        "seed": seed,
        "compare": bool(compare),
        "batch_size": None if batch_size is None else int(batch_size),
        "max_input_length": None if max_length is None else int(max_length),
        "max_history_turns": None if max_history_turns is None else int(max_history_turns),
        "chat_template": chat_template,
    }
    if no_repeat_ngram_size:
        settings["no_repeat_ngram_size"] = int(no_repeat_ngram_size)
    if repetition_penalty is not None and float(repetition_penalty) != 1.0:
        settings["repetition_penalty"] = float(repetition_penalty)
    if block_layout_markers:
        settings["block_layout_markers"] = "markers+line_start+control_tokens"
    if response_no_repeat_ngram_size:  # its rule changed since (number tokens are never banned): stored with n
        settings["response_no_repeat_ngram_size"] = f"{int(response_no_repeat_ngram_size)}+numbers_exempt"
    if normalize_scores:
        settings["normalize_scores"] = True
    if conditional_end:
        settings["conditional_end"] = True
    if plausibility:
        settings["plausibility"] = float(plausibility)
    if block_immediate_repeats:
        settings["block_immediate_repeats"] = True
    if capitalize_sentences:
        settings["capitalize_sentences"] = True
    if trim_unfinished:
        settings["trim_unfinished"] = True
    if prefer_finished and int(num_beams) > 1:
        settings["prefer_finished"] = True
    if format is not None:
        settings["format"] = dataclasses.asdict(format) if dataclasses.is_dataclass(format) else repr(format)
    settings.update(options)
    if model_name is not None:
        settings = {"model": str(model_name), **settings}
    return json.loads(json.dumps(settings, default=str))


CORE = dict(alpha=0.5, p=0.9, num_beams=4, do_sample=False, max_new_tokens=64, seed=0, batch_size=8)
OPTION_SETS = [
    dict(CORE),
    dict(CORE, alpha=0, p=1, num_beams=1, seed=None, compare=True, model_name="m"),
    dict(CORE, alpha="adaptive:0.8", do_sample=True, max_length=320, max_history_turns=3, chat_template=True,
         no_repeat_ngram_size=3, repetition_penalty=1.2, block_layout_markers=True, response_no_repeat_ngram_size=3,
         normalize_scores=True, conditional_end=True, plausibility=0.1, block_immediate_repeats=True,
         capitalize_sentences=True, trim_unfinished=True, prefer_finished=True, dtype="bfloat16", model_name="m"),
    dict(CORE, alpha="cocoa", num_beams=1, prefer_finished=True, repetition_penalty=1.0, no_repeat_ngram_size=0,
         format=DialogueFormat(user_prefix="Q: "), chat_template=False),
]


@pytest.mark.parametrize("options", OPTION_SETS)
def test_settings_are_those_written_before_key_for_key_and_in_order(options):
    old = json.dumps(_settings_before_decode_config(**options))
    names = set(DecodeConfig.option_names())
    config = DecodeConfig(**{k: v for k, v in options.items() if k in names})
    run = {k: v for k, v in options.items() if k not in names}
    assert json.dumps(config.settings(**run)) == old
    assert json.dumps(decode_settings(**options)) == old
    assert json.dumps(decode_settings(config, **run)) == old


def test_the_commands_settings_are_those_written_before():
    args = build_parser().parse_args(["generate", "--input", "a", "--output", "b", "--model", "m"])
    config = DecodeConfig.from_args(args)
    old = _settings_before_decode_config(
        alpha=defaults.ALPHA, p=defaults.P, num_beams=4, do_sample=False, max_new_tokens=64, seed=0, batch_size=8,
        compare=False, model_name="m", no_repeat_ngram_size=0, repetition_penalty=1.0, block_layout_markers=True,
        response_no_repeat_ngram_size=3, conditional_end=True, block_immediate_repeats=True,
        capitalize_sentences=True, plausibility=defaults.PLAUSIBILITY, dtype=None)
    now = config.settings(model_name="m", dtype=None)
    # the command defaults added since: responses end at a line break when no chat template is used,
    # copied numbers stay whole, and the PMI cap (off in the tests' paper setting)
    assert now.pop("end_at_line_break") == "auto"
    assert now.pop("keep_copied_numbers") is True
    assert now.pop("pmi_cap", None) == defaults.PMI_CAP
    assert json.dumps(now) == json.dumps(old)


# ---------------------------------------------------------------------------- the command line
def _parse(command, flags):
    required = ["--input", "in.jsonl", "--output", "out.jsonl"] if command == "generate" else []
    return build_parser().parse_args([command, *required, *flags])


def test_no_flag_gives_the_commands_defaults():
    assert DecodeConfig.from_args(_parse("generate", [])) == DecodeConfig.cli_defaults()
    assert DecodeConfig.from_args(_parse("demo", [])) == DecodeConfig.cli_defaults().replace(max_new_tokens=40)
    library, commands = DecodeConfig(), DecodeConfig.cli_defaults()
    assert (commands.alpha, commands.p, commands.plausibility) == (defaults.ALPHA, defaults.P, defaults.PLAUSIBILITY)
    assert commands.block_layout_markers and not library.block_layout_markers  # the commands guard, the library asks


@pytest.mark.parametrize("command, flags, changes", [
    ("generate", ["--alpha", "adaptive:0.8", "--p", "0.75", "--num-beams", "2", "--do-sample", "--seed", "7",
                  "--batch-size", "3", "--max-input-length", "64", "--max-history-turns", "2", "--chat-template", "on"],
     dict(alpha="adaptive:0.8:0.5", p=0.75, num_beams=2, do_sample=True, seed=7, batch_size=3, max_length=64,
          max_history_turns=2, chat_template=True)),
    ("generate", ["--allow-layout-markers", "--no-conditional-end", "--no-block-immediate-repeats",
                  "--no-capitalize-sentences", "--trim-unfinished", "--prefer-finished", "--normalize-scores",
                  "--no-repeat-ngram-size", "4", "--response-no-repeat-ngram-size", "0", "--repetition-penalty", "1.3",
                  "--plausibility", "0", "--chat-template", "off", "--max-new-tokens", "9"],
     dict(block_layout_markers=False, conditional_end=False, block_immediate_repeats=False,
          capitalize_sentences=False, trim_unfinished=True, prefer_finished=True, normalize_scores=True,
          no_repeat_ngram_size=4, response_no_repeat_ngram_size=0, repetition_penalty=1.3, plausibility=0.0,
          chat_template=False, max_new_tokens=9)),
    ("demo", ["--alpha", "0.3", "--num-beams", "1", "--no-conditional-end", "--max-input-length", "128"],
     dict(alpha=0.3, num_beams=1, conditional_end=False, max_length=128, max_new_tokens=40)),
])
def test_flags_round_trip_into_the_config(command, flags, changes):
    assert DecodeConfig.from_args(_parse(command, flags)) == DecodeConfig.cli_defaults().replace(**changes)


def test_demo_has_no_flags_for_what_it_fixes():
    for flag in ("--batch-size", "--seed", "--do-sample"):
        with pytest.raises(SystemExit):
            _parse("demo", [flag, "1"] if flag != "--do-sample" else [flag])


# ---------------------------------------------------------------------------- a new option
@pytest.fixture
def with_new_option(monkeypatch):
    """DecodeConfig with one more field, ``shimmer``, as if it had been declared there: every module
    that holds the class gets the extended one (nothing else changes)."""
    extended = dataclasses.make_dataclass(
        "DecodeConfig", [("shimmer", bool, option(False, help="make every response shimmer (default: {default})"))],
        bases=(DecodeConfig,), frozen=True)
    rebound = 0
    for name, module in list(sys.modules.items()):
        if (name == "pmi_decode" or name.startswith("pmi_decode.")) and vars(module).get("DecodeConfig") is DecodeConfig:
            monkeypatch.setattr(module, "DecodeConfig", extended)
            rebound += 1
    assert rebound >= 6
    return extended


def test_a_new_option_reaches_the_flags_and_the_settings(with_new_option, capsys):
    for command in ("generate", "demo"):
        assert with_new_option.from_args(_parse(command, ["--shimmer"])).shimmer is True
        assert with_new_option.from_args(_parse(command, ["--no-shimmer"])).shimmer is False
        assert with_new_option.from_args(_parse(command, [])).shimmer is False
        with pytest.raises(SystemExit):
            main([command, "--help"])
        assert "make every response shimmer (default: off)" in " ".join(capsys.readouterr().out.split())
    assert with_new_option(shimmer=True).settings()["shimmer"] is True
    assert with_new_option().settings() == DecodeConfig().settings()  # files decoded without it still resume
    assert decode_settings(shimmer=True)["shimmer"] is True


def test_a_new_option_reaches_sweeps_and_comparisons(with_new_option, tmp_path):
    assert "shimmer" in decode_option_names()
    sweep = SweepConfig(input="in.jsonl", output_dir=str(tmp_path), decode_options={"shimmer": True})
    assert sweep.generation_settings("beam_search")["decode_options"] == {"shimmer": True}
    assert sweep.decoding(Cell("greedy", 0.5, 0.9)) == with_new_option(
        alpha=0.5, p=0.9, num_beams=1, do_sample=False, max_new_tokens=40, batch_size=4, shimmer=True)
    with pytest.raises(ValueError, match="decode_options.shimmer must be true or false"):
        SweepConfig(input="in.jsonl", decode_options={"shimmer": "yes"})

    assert compare.system_config({"max_new_tokens": 8}, {"alpha": 0, "shimmer": True}).shimmer is True
    assert compare.system_config({"guards": {"shimmer": True}}, {"alpha": 0, "guards": True}).shimmer is True
    path = tmp_path / "compare.yaml"
    path.write_text("max_new_tokens: 8\nsystems:\n  a: {alpha: 0, shimmer: true}\n  b: {alpha: 0, shimmer: 2}\n")
    with pytest.raises(SystemExit, match="system 'b': shimmer must be true or false, got 2"):
        compare.load_config(str(path))


def test_a_new_option_reaches_the_records_generate_writes(with_new_option, tmp_path):
    folder = saved_tiny_model(tmp_path / "tiny")
    inp, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    inp.write_text("".join(json.dumps({"id": str(i), "document": d, "history": h}) + "\n"
                           for i, (d, h) in enumerate(DIALOGUES[:2])))
    common = ["generate", "--model", folder, "--input", str(inp), "--output", str(out), "--max-new-tokens", "3",
              "--num-beams", "1", "--quiet"]
    assert main(common + ["--shimmer"]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 2 and all(r["settings"]["shimmer"] is True for r in rows)
    assert main(common + ["--no-shimmer"]) == 1  # other settings than the file's: refused


# The layout rules (no import circle, scripts import the package only, at most 12 parameters)
# are checked for the whole package in tests/test_layout.py.


def test_every_option_is_read_by_the_code_that_decodes():
    """A field added to DecodeConfig gets its flag, its setting and its resume check from the
    declaration, but what it does must be passed on by hand (``processor_options``,
    ``generate_kwargs``, ``response_guards``, the batch decoder): a field that nothing reads would
    be stored with every output record while the decoder ignores it."""
    import re

    source = (ROOT / "pmi_decode" / "decode_config.py").read_text(encoding="utf-8")
    methods = source[source.index("    def __post_init__"):]
    others = [path.read_text(encoding="utf-8") for path in (ROOT / "pmi_decode").rglob("*.py")
              if path.name != "decode_config.py"]
    unread = [f.name for f in dataclasses.fields(DecodeConfig)
              if not re.search(rf"\bself\.{f.name}\b", methods)
              and not any(re.search(rf"\bconfig\.{f.name}\b", text) for text in others)]
    assert not unread, (f"DecodeConfig options that nothing reads: {unread}; pass each on where it acts "
                        "(DecodeConfig.processor_options for pmi_generate, generate_kwargs, response_guards, ...)")
