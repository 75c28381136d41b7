"""The custom_generate entry (hub/pmi-decode) and pmi_decoding_loop decode what pmi_generate decodes.

transformers loads the folder the way it loads a hub repository (``custom_generate/generate.py``,
its requirements checked), here from the local checkout with ``trust_remote_code=True``.
"""

import inspect
import re
import shutil
from pathlib import Path

import pytest
import torch
from tiny_models import DIALOGUES, PEAKED, tiny_model, tiny_tokenizer
from transformers import AutoModelForCausalLM, LogitsProcessor
from transformers.generation.streamers import BaseStreamer
from transformers.dynamic_module_utils import check_python_requirements, get_cached_module_file
from transformers.utils.hub import cached_files, has_file

from pmi_decode import build_inputs, pmi_generate
from pmi_decode.custom_generate import generate as entry
from pmi_decode.custom_generate import pmi_decoding_loop

FOLDER = Path(__file__).resolve().parents[1] / "hub" / "pmi-decode"
NEW = dict(max_new_tokens=8)
MODES = {
    "greedy": dict(),
    "beam": dict(num_beams=3, num_return_sequences=2, length_penalty=0.7),
    "sampling": dict(do_sample=True),
    "beam_sampling": dict(do_sample=True, num_beams=3, num_return_sequences=2),
}


def setup(kind="llama"):
    tok, model = tiny_tokenizer(kind), tiny_model(kind, logit_scale=PEAKED[kind])
    return model, build_inputs(tok, [d for d, _ in DIALOGUES], [h for _, h in DIALOGUES], model=model)


def seeded(fn, **kwargs):
    torch.manual_seed(0)
    return fn(**kwargs)


@pytest.mark.parametrize("kind", ["llama", "bart"])
@pytest.mark.parametrize("mode", list(MODES))
def test_the_folder_decodes_as_pmi_generate(kind, mode):
    model, inputs = setup(kind)
    opts = dict(**NEW, **MODES[mode])
    expected = seeded(lambda: pmi_generate(model, inputs, alpha=0.5, p=0.9, **opts))
    got = seeded(lambda: model.generate(**inputs["conditional"], custom_generate=str(FOLDER), trust_remote_code=True,
                                        alpha=0.5, p=0.9, unconditional_inputs=inputs["unconditional"], **opts))
    assert torch.equal(got, expected)
    cfg_slot = seeded(lambda: model.generate(
        **inputs["conditional"], custom_generate=str(FOLDER), trust_remote_code=True, alpha=0.5, p=0.9,
        negative_prompt_ids=inputs["unconditional"]["input_ids"],
        negative_prompt_attention_mask=inputs["unconditional"]["attention_mask"], **opts))
    assert torch.equal(cfg_slot, expected)
    plain = seeded(lambda: model.generate(**inputs["conditional"], **opts))
    assert not torch.equal(got, plain)  # PMI-Decode changed the output, so the equality above says something


def test_the_folder_passes_options_through():
    """Options of the method (normalize, conditional_end, paired) and generate's own reach pmi_generate."""
    model, inputs = setup()
    opts = dict(num_beams=3, normalize=True, conditional_end=True, min_new_tokens=3, **NEW)
    expected = pmi_generate(model, inputs, alpha=0.75, p=0.8, **opts)
    got = model.generate(**inputs["conditional"], custom_generate=str(FOLDER), trust_remote_code=True, alpha=0.75,
                         p=0.8, unconditional_inputs=inputs["unconditional"], **opts)
    assert torch.equal(got, expected)
    assert not torch.equal(got, pmi_generate(model, inputs, alpha=0.75, p=0.8, num_beams=3, **NEW))
    with pytest.raises(ValueError, match="beam sampling draws"):
        model.generate(**inputs["conditional"], custom_generate=str(FOLDER), trust_remote_code=True, alpha=0.5,
                       unconditional_inputs=inputs["unconditional"], paired=True, do_sample=True, num_beams=2, **NEW)


def test_a_model_loaded_from_a_folder_with_the_entry_uses_it_without_recursing(tmp_path):
    """from_pretrained(trust_remote_code=True) on a folder holding custom_generate/ replaces the
    model's generate with the entry; the entry must call the class's generate, not model.generate."""
    model, inputs = setup()
    model.save_pretrained(tmp_path)
    shutil.copytree(FOLDER / "custom_generate", tmp_path / "custom_generate")
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path, trust_remote_code=True, dtype=torch.float64).eval()
    assert "generate" in vars(loaded)  # transformers installed the entry on the instance
    for mode in ("greedy", "beam", "sampling"):
        opts = dict(**NEW, **MODES[mode])
        expected = seeded(lambda: pmi_generate(model, inputs, alpha=0.5, p=0.9, **opts))
        got = seeded(lambda: loaded.generate(**inputs["conditional"], alpha=0.5, p=0.9,
                                             unconditional_inputs=inputs["unconditional"], **opts))
        assert torch.equal(got, expected)
        assert torch.equal(seeded(lambda: pmi_generate(loaded, inputs, alpha=0.5, p=0.9, **opts)), expected)


class AddBias(LogitsProcessor):
    """A user processor: pmi_generate applies it before PMIDecode, so must the loop."""

    def __call__(self, input_ids, scores):
        bias = torch.zeros_like(scores)
        bias[:, 5:40] = 3.0
        return scores + bias


@pytest.mark.parametrize("kind", ["llama", "bart"])
@pytest.mark.parametrize("mode", list(MODES))
def test_the_decoding_loop_equals_pmi_generate(kind, mode):
    model, inputs = setup(kind)
    opts = dict(**NEW, **MODES[mode])
    if MODES[mode].get("do_sample"):
        opts.update(temperature=0.7, top_k=50)  # warpers generate appends after PMIDecode
    for user in ([], [AddBias()]):
        expected = seeded(lambda: pmi_generate(model, inputs, alpha=0.5, p=0.9, logits_processor=list(user), **opts))
        got = seeded(lambda: model.generate(**inputs["conditional"], custom_generate=pmi_decoding_loop, alpha=0.5,
                                            p=0.9, unconditional_inputs=inputs["unconditional"],
                                            logits_processor=list(user), **opts))
        assert torch.equal(got, expected)
    assert not torch.equal(got, seeded(lambda: model.generate(**inputs["conditional"], logits_processor=[AddBias()],
                                                              **opts)))


def test_the_decoding_loop_with_adaptive_alpha_and_scores():
    model, inputs = setup()
    opts = dict(num_beams=3, return_dict_in_generate=True, output_scores=True, **NEW)
    expected = pmi_generate(model, inputs, alpha="adaptive", p=0.9, **opts)
    got = model.generate(**inputs["conditional"], custom_generate=pmi_decoding_loop, alpha="adaptive", p=0.9,
                         unconditional_inputs=inputs["unconditional"], **opts)
    assert torch.equal(got.sequences, expected.sequences)
    torch.testing.assert_close(got.sequences_scores, expected.sequences_scores)


def test_the_decoding_loop_refuses_what_it_cannot_run():
    model, inputs = setup()
    cond = inputs["conditional"]
    with pytest.raises(ValueError, match="greedy search, sampling, beam search and beam sampling"):
        model.generate(**cond, custom_generate=pmi_decoding_loop, alpha=0.5, unconditional_inputs=inputs["unconditional"],
                       prompt_lookup_num_tokens=2, **NEW)
    with pytest.raises(ValueError, match="needs the document-free prompt"):
        model.generate(**cond, custom_generate=pmi_decoding_loop, alpha=0.5, **NEW)
    one_row = {k: v[:1] for k, v in inputs["unconditional"].items()}
    with pytest.raises(ValueError, match="one document-free row per prompt"):
        model.generate(**cond, custom_generate=pmi_decoding_loop, alpha=0.5, unconditional_inputs=one_row, **NEW)
    with pytest.raises(ValueError, match=r"alpha must be a number in \[0, 1\]"):
        model.generate(**cond, custom_generate=pmi_decoding_loop, alpha=2.0,
                       unconditional_inputs=inputs["unconditional"], **NEW)
    with pytest.raises(ValueError, match="this loop never sees them"):  # generate keeps them for its own use
        model.generate(**cond, custom_generate=pmi_decoding_loop, alpha=0.5,
                       negative_prompt_ids=inputs["unconditional"]["input_ids"],
                       negative_prompt_attention_mask=inputs["unconditional"]["attention_mask"], **NEW)
    with pytest.raises(ValueError, match="assisted decoding"):  # generate drops it for a callable
        one = {k: v[:1] for k, v in cond.items()}
        model.generate(**one, custom_generate=pmi_decoding_loop, alpha=0.5, assistant_model=model,
                       unconditional_inputs={k: v[:1] for k, v in inputs["unconditional"].items()}, **NEW)


@pytest.mark.real_defaults
@pytest.mark.parametrize("kind", ["llama", "bart"])
def test_the_decoding_loop_chooses_as_pmi_generate_after_processors_that_change_the_scores(kind):
    """With the model's final choice, processors that lift a row's scores above probability 1 (a
    repetition penalty below 1, a sequence bias) are summed as plain beam search sums them."""
    model, inputs = setup(kind)
    for changes in (dict(repetition_penalty=0.7), dict(sequence_bias={(30,): 2.0})):
        opts = dict(num_beams=3, max_new_tokens=6, **changes)  # the shipped defaults
        expected = pmi_generate(model, inputs, **opts)
        got = model.generate(**inputs["conditional"], custom_generate=pmi_decoding_loop,
                             unconditional_inputs=inputs["unconditional"], **opts)
        assert torch.equal(got, expected)


class Collect(BaseStreamer):
    """A streamer that keeps what generate puts into it."""

    def __init__(self):
        self.put_ids, self.ended = [], False

    def put(self, value):
        self.put_ids.append(value.reshape(-1).tolist())

    def end(self):
        self.ended = True


def test_the_decoding_loop_streams_what_it_decodes():
    """transformers drops a callable's streamer after putting the prompt in; the loop takes it back."""
    model, inputs = setup()
    one = {part: {k: v[:1] for k, v in inputs[part].items()} for part in ("conditional", "unconditional")}
    streamer = Collect()
    out = model.generate(**one["conditional"], custom_generate=pmi_decoding_loop, alpha=0.5, p=0.9,
                         unconditional_inputs=one["unconditional"], streamer=streamer, **NEW)
    assert torch.equal(out, pmi_generate(model, one, alpha=0.5, p=0.9, **NEW))
    assert streamer.ended
    prompt, *steps = streamer.put_ids
    assert prompt == one["conditional"]["input_ids"][0].tolist()
    assert sum(steps, []) == out[0, len(prompt):].tolist()
    with pytest.raises(ValueError, match="cannot be used with beam search"):
        model.generate(**one["conditional"], custom_generate=pmi_decoding_loop, alpha=0.5,
                       unconditional_inputs=one["unconditional"], streamer=Collect(), num_beams=2, **NEW)


def test_the_entry_refuses_missing_or_doubled_prompts():
    model, inputs = setup()
    cond, uncond = inputs["conditional"], inputs["unconditional"]
    call = dict(custom_generate=str(FOLDER), trust_remote_code=True, alpha=0.5, **NEW)
    with pytest.raises(ValueError, match="unconditional_inputs=.*or negative_prompt_ids="):
        model.generate(**cond, **call)
    with pytest.raises(ValueError, match="not both"):
        model.generate(**cond, unconditional_inputs=uncond, negative_prompt_ids=uncond["input_ids"],
                       negative_prompt_attention_mask=uncond["attention_mask"], **call)
    with pytest.raises(ValueError, match="pass negative_prompt_attention_mask"):
        model.generate(**cond, negative_prompt_ids=uncond["input_ids"], **call)
    with pytest.raises(ValueError, match="assisted"):
        model.generate(**cond, unconditional_inputs=uncond, prompt_lookup_num_tokens=2, **call)
    with pytest.raises(ValueError, match="trust_remote_code|custom generation code"):
        model.generate(**cond, custom_generate=str(FOLDER), alpha=0.5, unconditional_inputs=uncond, **NEW)


def test_requirements_put_each_bound_on_its_own_line_and_hold_here():
    """transformers reads one version specifier per line: a second one on a line would go unchecked."""
    lines = [line.strip() for line in (FOLDER / "custom_generate" / "requirements.txt").read_text().splitlines()
             if line.strip() and not line.startswith("#")]
    assert any(line.startswith("pmi-decode") for line in lines)
    assert {"transformers>=5.0", "transformers<5.25"} <= set(lines)
    for line in lines:
        assert len(re.findall(r"[<>=!~]=?", re.sub(r"[<>=!~]=", "=", line))) <= 1, line
    check_python_requirements(str(FOLDER), requirements_file="custom_generate/requirements.txt")


def test_no_argument_of_the_entry_is_read_by_the_hub_download():
    """generate passes its keyword arguments to the download too; none of ours may be a download option."""
    reserved = set()
    for fn in (cached_files, has_file, get_cached_module_file):
        reserved |= {name for name, par in inspect.signature(fn).parameters.items()
                     if par.kind is par.KEYWORD_ONLY or par.default is not par.empty}
    assert {"revision", "token", "cache_dir", "subfolder"} <= reserved
    ours = set(inspect.signature(entry).parameters) | set(inspect.signature(pmi_decoding_loop).parameters)
    assert not ours & reserved, ours & reserved


def test_the_folder_is_thin_and_documented():
    code = (FOLDER / "custom_generate" / "generate.py").read_text()
    assert "from pmi_decode.custom_generate import generate" in code
    assert len([line for line in code.splitlines() if line.strip()]) < 15
    readme = (FOLDER / "README.md").read_text()
    front = readme.split("---")[1]
    assert "library_name: transformers" in front and "- custom_generate" in front
    for section in ("Description", "Base model", "Model compatibility", "Additional arguments", "Output", "Example"):
        assert f"\n## {section}\n" in readme, section


@pytest.mark.real_defaults
def test_the_decoding_loop_uses_pmi_generates_defaults():
    """With the shipped defaults (the plausibility head on), the callable loop and the hub entry
    still decode what pmi_generate decodes when no option is given."""
    from pmi_decode import defaults
    from pmi_decode.custom_generate import generate as hub_generate
    from pmi_decode.custom_generate import pmi_decoding_loop

    assert defaults.PLAUSIBILITY > 0
    model, inputs = setup("llama")
    kwargs = dict(max_new_tokens=8, min_new_tokens=4, num_beams=2)
    torch.manual_seed(0)
    want = pmi_generate(model, inputs, **kwargs)
    torch.manual_seed(0)
    loop = model.generate(**inputs["conditional"], custom_generate=pmi_decoding_loop,
                          unconditional_inputs=inputs["unconditional"], **kwargs)
    torch.manual_seed(0)
    entry = hub_generate(model, **inputs["conditional"], unconditional_inputs=inputs["unconditional"], **kwargs)
    assert torch.equal(loop, want) and torch.equal(entry, want)


def test_the_entries_take_the_plausibility_head_and_the_cap():
    """Both entries pass ``plausibility`` and ``pmi_cap`` on: what pmi_generate decodes with them
    (a cap low enough to clip a tiny model's PMI, so a dropped one would show)."""
    from pmi_decode.custom_generate import generate as hub_generate
    from pmi_decode.custom_generate import pmi_decoding_loop

    model, inputs = setup("llama")
    options = dict(plausibility=0.2, pmi_cap=0.05)
    kwargs = dict(max_new_tokens=8, min_new_tokens=4, num_beams=2)
    torch.manual_seed(0)
    want = pmi_generate(model, inputs, **options, **kwargs)
    torch.manual_seed(0)
    uncapped = pmi_generate(model, inputs, plausibility=0.2, **kwargs)
    torch.manual_seed(0)
    loop = model.generate(**inputs["conditional"], custom_generate=pmi_decoding_loop,
                          unconditional_inputs=inputs["unconditional"], **options, **kwargs)
    torch.manual_seed(0)
    entry = hub_generate(model, **inputs["conditional"], unconditional_inputs=inputs["unconditional"], **options,
                         **kwargs)
    assert not torch.equal(want, uncapped)
    assert torch.equal(loop, want) and torch.equal(entry, want)


@pytest.mark.parametrize("kind", ["llama", "bart"])
def test_the_loop_and_the_folder_make_the_model_choice_as_pmi_generate(kind):
    """final_choice="model" (the shipped default) reaches both entries and picks what pmi_generate picks."""
    model, inputs = setup(kind)
    opts = dict(alpha=0.7, p=0.9, num_beams=4, num_return_sequences=2, length_penalty=0.7, final_choice="model", **NEW)
    expected = pmi_generate(model, inputs, **opts)
    assert not torch.equal(expected, pmi_generate(model, inputs, **dict(opts, final_choice="pmi")))
    folder = model.generate(**inputs["conditional"], custom_generate=str(FOLDER), trust_remote_code=True,
                            unconditional_inputs=inputs["unconditional"], **opts)
    assert torch.equal(folder, expected)
    loop = model.generate(**inputs["conditional"], custom_generate=pmi_decoding_loop,
                          unconditional_inputs=inputs["unconditional"], **opts)
    assert torch.equal(loop, expected)


def test_the_entry_hands_every_declared_option_to_pmi_generate(monkeypatch):
    """An option added to GENERATE_OPTIONS reaches pmi_generate without another edit."""
    import pmi_decode.custom_generate as entry_module

    seen = {}
    monkeypatch.setattr(entry_module, "pmi_generate", lambda model, inputs, **kwargs: seen.update(kwargs))
    model, inputs = setup()
    given = {name: object() for name in entry_module.GENERATE_OPTIONS if name != "unconditional_inputs"}
    entry(model, **inputs["conditional"], unconditional_inputs=inputs["unconditional"], **given)
    assert {name: seen.get(name) for name in given} == given
