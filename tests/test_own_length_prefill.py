"""The paired path's prompt prefill with each half at its own width (paired_prompt_cache) gives
the slow reference's tokens, and the joint prefill's, for rows of different lengths and padding."""

import pytest
import torch
from reference import reference_for
from tiny_models import DIALOGUES, PEAKED, tiny_model, tiny_tokenizer
from transformers import AutoModelForCausalLM, MistralConfig

from pmi_decode import build_inputs, pmi_generate
from pmi_decode.generation import paired_prompt_cache, prompt_cache
from pmi_decode.paired import stack_inputs

MODES = {
    "greedy": dict(),
    "beam": dict(num_beams=4, num_return_sequences=2, length_penalty=0.7, early_stopping=True),
}
NEW = dict(max_new_tokens=8, min_new_tokens=4)
# (alpha, p) that change the tiny model's tokens against plain decoding in every mode here (a
# comparison where PMI-Decode changes nothing would prove nothing)
OBJECTIVE = {"llama": (0.5, 0.9), "gpt2": (0.5, 0.9), "bloom": (1.0, 1.0), "mistral": (0.5, 0.9)}


def _model(kind):
    # transformers' BLOOM yields NaN for left-padded rows in float64, so it runs in float32
    dtype = torch.float32 if kind == "bloom" else torch.float64
    if kind != "mistral":
        return tiny_tokenizer(kind), tiny_model(kind, dtype=dtype, logit_scale=PEAKED[kind])
    # sliding-window layers: the window (512) is wider than any prompt here, so attention is
    # full and the reference applies, but the cache is not plain and the joint prefill is used
    torch.manual_seed(0)
    config = MistralConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                           num_key_value_heads=2, vocab_size=320, sliding_window=512, max_position_embeddings=1024,
                           pad_token_id=0, bos_token_id=1, eos_token_id=2, tie_word_embeddings=False)
    model = AutoModelForCausalLM.from_config(config).to(dtype).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(PEAKED["llama"])
    model.generation_config.pad_token_id, model.generation_config.eos_token_id = 0, 2
    return tiny_tokenizer("llama"), model


def _widen(batch: dict, extra: int, side: str = "left") -> dict:
    """The same rows with ``extra`` more padding columns."""
    pad = (extra, 0) if side == "left" else (0, extra)
    return {"input_ids": torch.nn.functional.pad(batch["input_ids"], pad, value=0),
            "attention_mask": torch.nn.functional.pad(batch["attention_mask"], pad, value=0)}


def _right_padded(batch: dict) -> dict:
    ids, mask = batch["input_ids"].clone(), batch["attention_mask"].clone()
    for row in range(ids.shape[0]):
        keep = mask[row].bool()
        n = int(keep.sum())
        ids[row] = torch.cat([ids[row][keep], ids[row][~keep]])
        mask[row] = torch.cat([torch.ones(n, dtype=mask.dtype), torch.zeros(mask.shape[1] - n, dtype=mask.dtype)])
    return {"input_ids": ids, "attention_mask": mask}


def _inputs(tok, model, layout):
    inputs = build_inputs(tok, [d for d, _ in DIALOGUES], [h for _, h in DIALOGUES], model=model)
    cond, uncond = inputs["conditional"], inputs["unconditional"]
    if layout == "extra_padding":  # both halves wider than their longest row
        cond, uncond = _widen(cond, 3), _widen(_right_padded(uncond), 5, side="right")
    return {"conditional": cond, "unconditional": uncond}


def _reference(model, inputs, mode, alpha=0.5, p=0.9):
    proc = reference_for(model, inputs, alpha, p)
    return model.generate(**inputs["conditional"], logits_processor=[proc], **NEW, **MODES[mode])


def _prefilled_tokens(model, fn):
    """Tokens run by the forwards before generate's first step (all but the last prompt token)."""
    seen = []
    handle = model.register_forward_pre_hook(
        lambda module, args, kwargs: seen.append(kwargs["input_ids"].shape), with_kwargs=True)
    try:
        out = fn()
    finally:
        handle.remove()
    return out, seen


@pytest.mark.exactness
@pytest.mark.parametrize("kind", ["llama", "gpt2", "bloom"])
@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("layout", ["build_inputs", "extra_padding"])
def test_own_length_prefill_equals_the_slow_reference(kind, mode, layout):
    tok, model = _model(kind)
    inputs = _inputs(tok, model, layout)
    alpha, p = OBJECTIVE[kind]
    expected = _reference(model, inputs, mode, alpha, p)
    got = pmi_generate(model, inputs, alpha=alpha, p=p, paired=True, **NEW, **MODES[mode])
    assert torch.equal(got, expected)
    joint = pmi_generate(model, inputs, alpha=alpha, p=p, paired=True, share_prompt=False, **NEW, **MODES[mode])
    assert torch.equal(got, joint)
    assert not torch.equal(got, model.generate(**inputs["conditional"], **NEW, **MODES[mode]))


@pytest.mark.parametrize("kind", ["llama", "gpt2"])
def test_each_half_runs_only_its_own_columns(kind):
    tok, model = _model(kind)
    inputs = _inputs(tok, model, "extra_padding")
    joint = stack_inputs(model, inputs)
    rows, width = joint["input_ids"].shape[0] // 2, joint["input_ids"].shape[1] - 1
    cond_len = int(inputs["conditional"]["attention_mask"][:, :-1].sum(-1).max())
    uncond_len = int(inputs["unconditional"]["attention_mask"].sum(-1).max()) - 1
    assert uncond_len < cond_len < width  # the layout must hold padding both halves can drop
    cache, seen = _prefilled_tokens(model, lambda: paired_prompt_cache(model, joint, 4))
    assert seen == [torch.Size([rows, cond_len]), torch.Size([rows, uncond_len])]
    assert cache.get_seq_length() == width and cache.layers[0].keys.shape[0] == 2 * rows * 4

    # real positions hold the joint prefill's keys and values; the added columns hold zeros
    reference = prompt_cache(model, joint, 4)
    real = joint["attention_mask"][:, :-1].bool().repeat_interleave(4, dim=0)
    for ours, theirs in zip(cache.layers, reference.layers):
        for a, b in ((ours.keys, theirs.keys), (ours.values, theirs.values)):
            torch.testing.assert_close(a.transpose(1, 2)[real], b.transpose(1, 2)[real])
    added = torch.zeros_like(real)
    added[:rows * 4, : width - cond_len] = True
    added[rows * 4:, : width - uncond_len] = True
    assert all(bool((layer.keys.transpose(1, 2)[added] == 0).all()) for layer in cache.layers)


def test_the_join_releases_each_document_free_layer_once_padded_in(monkeypatch):
    """The halves' caches are joined a layer at a time, and each document-free layer is released
    as soon as it is in: at most the layers not yet joined are held beside the joined cache."""
    import weakref

    import pmi_decode.generation as generation

    tok, model = _model("llama")
    joint = stack_inputs(model, _inputs(tok, model, "extra_padding"))
    real_prefill, real_pad = generation.prefill, torch.nn.functional.pad
    prefilled, alive_at_join = [], []

    def recording_prefill(*args, **kwargs):
        cache, logits = real_prefill(*args, **kwargs)
        prefilled.append([weakref.ref(layer.keys) for layer in cache.layers])
        return cache, logits

    def watching_pad(tensor, *args, **kwargs):
        if len(prefilled) == 2 and any(ref() is tensor for ref in prefilled[1]):  # a document-free layer's keys
            alive_at_join.append(sum(ref() is not None for ref in prefilled[1]))
        return real_pad(tensor, *args, **kwargs)

    monkeypatch.setattr(generation, "prefill", recording_prefill)
    monkeypatch.setattr(torch.nn.functional, "pad", watching_pad)
    cache = paired_prompt_cache(model, joint, 4)
    monkeypatch.undo()
    layers = model.config.num_hidden_layers
    assert layers > 1 and len(prefilled) == 2
    assert alive_at_join == list(range(layers, 0, -1))
    reference = prompt_cache(model, joint, 4)
    real = joint["attention_mask"][:, :-1].bool().repeat_interleave(4, dim=0)
    for ours, theirs in zip(cache.layers, reference.layers):
        torch.testing.assert_close(ours.values.transpose(1, 2)[real], theirs.values.transpose(1, 2)[real])


def test_greedy_search_gets_the_own_length_prefill_too():
    tok, model = _model("llama")
    inputs = _inputs(tok, model, "build_inputs")
    rows = inputs["conditional"]["input_ids"].shape[0]
    _, seen = _prefilled_tokens(model, lambda: pmi_generate(model, inputs, alpha=0.5, p=0.9, paired=True, **NEW))
    assert seen[0][0] == rows and seen[1][0] == rows  # the halves apart, not one stacked batch
    assert seen[1][1] < seen[0][1]


def test_sliding_window_layers_fall_back_to_the_joint_prefill():
    """A cache of sliding-window layers cannot be padded and joined by hand: the stacked batch
    is prefilled whole (and the tokens are still the reference's)."""
    tok, model = _model("mistral")
    inputs = _inputs(tok, model, "build_inputs")
    joint = stack_inputs(model, inputs)
    cache, seen = _prefilled_tokens(model, lambda: paired_prompt_cache(model, joint, 4))
    assert seen == [torch.Size([joint["input_ids"].shape[0], joint["input_ids"].shape[1] - 1])]
    assert cache is not None and cache.get_seq_length() == joint["input_ids"].shape[1] - 1
    for mode in MODES:
        got = pmi_generate(model, inputs, alpha=0.5, p=0.9, paired=True, **NEW, **MODES[mode])
        assert torch.equal(got, _reference(model, inputs, mode))
        assert not torch.equal(got, model.generate(**inputs["conditional"], **NEW, **MODES[mode]))


def test_encoder_decoders_and_odd_batches_get_no_cache():
    tok, model = tiny_tokenizer("bart"), tiny_model("bart")
    inputs = build_inputs(tok, [d for d, _ in DIALOGUES], [h for _, h in DIALOGUES], model=model)
    assert paired_prompt_cache(model, stack_inputs(model, inputs), 4) is None
    tok, model = _model("llama")
    joint = stack_inputs(model, _inputs(tok, model, "build_inputs"))
    assert paired_prompt_cache(model, {k: v[:5] for k, v in joint.items()}, 4) is None
