"""The prompt batches are checked in one place (pmi_decode.prompt_checks), so every path refuses a
bad batch with the same message and reads a good one the same way: the document-free prompts'
padding is moved where the model reads it without a change, whichever side the caller padded."""

import math

import pytest
import torch
from tiny_models import DIALOGUES, PEAKED, tiny_model, tiny_tokenizer

from pmi_decode import PMIDecode, build_inputs, pmi_generate
from pmi_decode.inputs import pad_batch

NEW = dict(max_new_tokens=6)
PAPER = dict(alpha=0.5, p=0.9, plausibility=0, pmi_cap=math.inf, final_choice="pmi")
PATHS = {"default": {}, "paired": dict(packed=False), "separate": dict(paired=False)}


def setup(kind):
    model = tiny_model(kind, logit_scale=PEAKED[kind])
    inputs = build_inputs(tiny_tokenizer(kind), [d for d, _ in DIALOGUES[:3]], [h for _, h in DIALOGUES[:3]],
                          model=model)
    return model, inputs


def rows_of(part) -> list[list[int]]:
    return [ids[mask.bool()].tolist() for ids, mask in zip(part["input_ids"], part["attention_mask"])]


def every_path(model, inputs, **generate_kwargs) -> dict:
    """Each path's tokens: PMIDecode inside generate, and pmi_generate's default, paired and separate paths."""
    out = {"PMIDecode": model.generate(**inputs["conditional"], logits_processor=[
        PMIDecode(0.5, 0.9, model=model, unconditional_inputs=inputs["unconditional"])], **generate_kwargs)}
    for name, path in PATHS.items():
        out[name] = pmi_generate(model, inputs, **PAPER, **path, **generate_kwargs)
    return out


@pytest.mark.parametrize("mode", [{}, dict(num_beams=3)], ids=["greedy", "beam"])
def test_encoder_decoder_document_free_prompts_padded_on_the_left_decode_as_on_the_right(mode):
    model, inputs = setup("bart")  # learned absolute positions: left padding would shift them
    left = dict(inputs, unconditional=pad_batch(rows_of(inputs["unconditional"]), 1, left=True))
    assert not bool(left["unconditional"]["attention_mask"][:, 0].all())
    want, got = every_path(model, inputs, **mode, **NEW), every_path(model, left, **mode, **NEW)
    for name in want:
        assert torch.equal(got[name], want[name]), name


def test_decoder_only_conditional_prompts_padded_on_the_right_are_refused_on_every_path():
    model, inputs = setup("llama")
    right = dict(inputs, conditional=pad_batch(rows_of(inputs["conditional"]), 0, left=False))
    for path in PATHS.values():
        with pytest.raises(ValueError, match=r"inputs\['conditional'\] is padded on the right .*pad on the left"):
            pmi_generate(model, right, **PAPER, **path, **NEW)


def _spoiled(inputs, part: str, change) -> dict:
    spoiled = {name: dict(inputs[name]) for name in ("conditional", "unconditional")}
    spoiled[part] = change(spoiled[part])
    return spoiled


def _with(key, make):
    def change(part):
        part[key] = make(part)
        return part
    return change


def _no_tokens_in_row_1(part):
    mask = part["attention_mask"].clone()
    mask[1] = 0
    return dict(part, attention_mask=mask)


SPOILS = {
    "a row with no tokens": (_no_tokens_in_row_1, r"has a row with no tokens .*rows \[1\]"),
    "no columns": (lambda part: {k: v[:, :0] for k, v in part.items()}, "has a row with no tokens"),
    "a mask of 2s": (_with("attention_mask", lambda part: part["attention_mask"] * 2), "0 .*and 1 .*only, found 2"),
    "float token ids": (_with("input_ids", lambda part: part["input_ids"].double()), "integer token ids"),
    "1-D tensors": (lambda part: {k: v[0] for k, v in part.items()}, "must be 2-D tensors of the same shape"),
    "lists": (lambda part: {k: v.tolist() for k, v in part.items()}, "must be 2-D tensors of the same shape"),
    "an id past the vocabulary": (_with("input_ids", lambda part: part["input_ids"] + 10_000),
                                  "outside the model's vocabulary of 320"),
}


@pytest.mark.parametrize("kind", ["llama", "bart"])
@pytest.mark.parametrize("spoil", SPOILS, ids=list(SPOILS))
def test_a_bad_batch_gets_one_message_on_every_path(kind, spoil):
    change, message = SPOILS[spoil]
    model, inputs = setup(kind)
    for part in ("conditional", "unconditional"):
        spoiled = _spoiled(inputs, part, change)
        for path in PATHS.values():
            with pytest.raises(ValueError, match=rf"inputs\['{part}'\].*{message}"):
                pmi_generate(model, spoiled, **PAPER, **path, **NEW)
    with pytest.raises(ValueError, match=f"unconditional_inputs.*{message}"):
        PMIDecode(0.5, 0.9, model=model, unconditional_inputs=change(dict(inputs["unconditional"])))


@pytest.mark.parametrize("kind", ["gpt2", "llama", "bart"])
def test_float_and_bool_masks_decode_as_integer_masks(kind):
    model, inputs = setup(kind)
    want = pmi_generate(model, inputs, **PAPER, num_beams=2, **NEW)
    for dtype in (torch.float32, torch.bool):
        masks = {part: dict(inputs[part], attention_mask=inputs[part]["attention_mask"].to(dtype))
                 for part in ("conditional", "unconditional")}
        assert torch.equal(pmi_generate(model, masks, **PAPER, num_beams=2, **NEW), want), dtype


def test_path_flags_and_counts_are_checked():
    model, inputs = setup("llama")
    for flags, message in ((dict(paired="no"), "paired must be True, False or None"),
                           (dict(paired=0), "paired must be True, False or None"),
                           (dict(share_prompt=None), "share_prompt must be True or False"),
                           (dict(num_beams=0), "num_beams must be a whole number >= 1")):
        with pytest.raises(ValueError, match=message):
            pmi_generate(model, inputs, **PAPER, **flags, **NEW)


def test_hidden_states_and_attentions_cover_the_whole_prompt_with_beams():
    """With beams, the prompt is run once and handed to generate as a cache, unless the first
    step's hidden states or attentions are asked for: they would hold the last position alone."""
    model, inputs = setup("llama")
    width = inputs["conditional"]["input_ids"].shape[1]
    asked = dict(num_beams=2, return_dict_in_generate=True, output_hidden_states=True, **NEW)
    plain = model.generate(**inputs["conditional"], **asked)
    got = pmi_generate(model, inputs, **PAPER, **asked)
    assert got.hidden_states[0][0].shape[1] == width == plain.hidden_states[0][0].shape[1]
