"""What makes a paired beam-search step cheaper must not change it: the nucleus from a sort of
the values only (same set as torch.sort's), and the cross-attention cache left in place where
beam search's reordering cannot change it."""

import math

import pytest
import torch
from test_processor import MODES, NEW_TOKENS, setup
from transformers import DynamicCache

from pmi_decode import PMIDecode, pmi_generate
from pmi_decode.generation import GroupedCrossAttentionCache
from pmi_decode.scores import _keep_sorted, _sorted_nucleus


def torch_sort_nucleus(probs, p):
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    return torch.zeros_like(probs, dtype=torch.bool).scatter_(-1, order, _keep_sorted(sorted_probs, p))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("p", [1e-9, 0.3, 0.9, 0.9999, 1 - 1e-12])
@pytest.mark.parametrize("temperature", [0.05, 1.0, 5.0])
def test_value_sort_finds_the_torch_sort_set(dtype, p, temperature):
    torch.manual_seed(4)
    probs = torch.softmax(torch.randn(12, 3000, dtype=dtype) * temperature, -1)
    probs[0, :50] = 0.0  # tokens of no mass (-inf log-probs) at the end of the order
    assert torch.equal(_sorted_nucleus(probs, p), torch_sort_nucleus(probs, p))


def test_ties_at_the_boundary_keep_the_lower_token_ids():
    probs = torch.zeros(2, 100)
    probs[:, 10:50] = 1 / 40  # 40 equal tokens; p 0.5 keeps 20 of them
    keep = _sorted_nucleus(probs, 0.5)
    assert keep.sum(-1).tolist() == [20, 20]
    assert keep[:, 10:30].all() and not keep[:, :10].any() and not keep[:, 30:].any()


def test_a_row_with_nan_is_left_to_torch_sort():
    probs = torch.softmax(torch.randn(3, 500), -1)
    probs[1, 7] = math.nan
    assert torch.equal(_sorted_nucleus(probs, 0.9), torch_sort_nucleus(probs, 0.9))


@pytest.mark.exactness
def test_paired_beam_search_leaves_the_cross_attention_cache_in_place():
    model, inputs = setup("bart", dtype=torch.float32)
    kwargs = dict(MODES["beam"], max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS // 2)
    reordered = []
    original = DynamicCache.reorder_cache

    def spy(self, beam_idx):
        reordered.append(self)
        return original(self, beam_idx)

    DynamicCache.reorder_cache = spy
    try:
        grouped = pmi_generate(model, inputs, alpha=0.5, p=0.9, paired=True, **kwargs)
        grouped_parts = set(map(id, reordered))
        reordered.clear()
        usual = pmi_generate(model, inputs, alpha=0.5, p=0.9, paired=True, share_prompt=False, **kwargs)
    finally:
        DynamicCache.reorder_cache = original
    assert torch.equal(grouped, usual)
    assert len(grouped_parts) == 1  # the self-attention part only
    assert len(set(map(id, reordered))) == 2  # without it: both parts


def _filled(beams, rows_equal):
    model, _ = setup("bart", dtype=torch.float32)
    cache = GroupedCrossAttentionCache(model, beams)
    torch.manual_seed(0)
    for layer in range(model.config.decoder_layers):
        cross = torch.randn(2, 1, 3, 4).repeat_interleave(beams, 0)
        if not rows_equal:
            cross[1] += 1.0
        cache.cross_attention_cache.update(cross.clone(), cross.clone(), layer)
        cache.self_attention_cache.update(torch.randn(2 * beams, 1, 1, 4), torch.randn(2 * beams, 1, 1, 4), layer)
    return cache


@pytest.mark.parametrize("rows_equal,order,moved", [
    (True, [1, 1, 0, 4, 4, 3], False),   # within each prompt: nothing to move
    (False, [1, 1, 0, 4, 4, 3], True),   # rows of one prompt differ: reordered as usual
    (True, [0, 0, 0, 0, 0, 0], True),    # a parent in another prompt's rows: reordered as usual
])
def test_cross_attention_part_is_reordered_where_it_could_change(rows_equal, order, moved):
    cache = _filled(3, rows_equal)
    kept = cache.cross_attention_cache.layers[0].keys
    before = kept.clone()
    beam_idx = torch.tensor(order)
    cache.reorder_cache(beam_idx)
    after = cache.cross_attention_cache.layers[0].keys
    assert torch.equal(after, before[beam_idx])  # the content a full reordering gives, either way
    assert (after is not kept) == moved


def _cross_attention_masks(model):
    """Record the cross-attention mask each decoder layer's first call is given (BART's layout)."""
    seen = []
    layer = model.get_decoder().layers[0].encoder_attn
    handle = layer.register_forward_pre_hook(
        lambda module, args, kwargs: seen.append(kwargs.get("attention_mask")), with_kwargs=True)
    return seen, handle


@pytest.mark.exactness
@pytest.mark.parametrize("kind", ["bart", "t5"])
@pytest.mark.parametrize("mode", ["greedy", "beam", "sampling"])
def test_cross_attention_bias_changes_no_token(kind, mode, monkeypatch):
    """The paired path hands the decoder its padding mask as a ready bias (built once per call):
    the tokens are those of the 2-D mask that transformers turns into a mask at every step."""
    import pmi_decode.generation as generation

    model, inputs = setup(kind, dtype=torch.float32)
    assert not bool(inputs["unconditional"]["attention_mask"].all())  # padded rows: a mask is needed
    kwargs = dict(MODES[mode], max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS // 2)
    torch.manual_seed(0)
    with_bias = pmi_generate(model, inputs, alpha=0.5, p=0.9, paired=True, **kwargs)
    monkeypatch.setattr(generation, "ADDITIVE_MASK_MODEL_TYPES", ())
    torch.manual_seed(0)
    without = pmi_generate(model, inputs, alpha=0.5, p=0.9, paired=True, **kwargs)
    assert torch.equal(with_bias, without)


def test_the_bias_is_built_once_and_given_to_every_step():
    model, inputs = setup("bart", dtype=torch.float32)
    seen, handle = _cross_attention_masks(model)
    try:
        pmi_generate(model, inputs, alpha=0.5, p=0.9, paired=True, max_new_tokens=NEW_TOKENS,
                     min_new_tokens=NEW_TOKENS)
    finally:
        handle.remove()
    assert len(seen) == NEW_TOKENS
    assert all(mask is seen[0] for mask in seen)  # one tensor for the whole call
    assert seen[0].dim() == 4 and seen[0].dtype == torch.float32
    joint = PMIDecode(0.5, 0.9).stack(inputs, model, pad_token_id=model.config.pad_token_id)
    padding = joint["attention_mask"] == 0
    assert padding.any() and seen[0].shape == (padding.shape[0], 1, 1, padding.shape[1])
    assert torch.equal(torch.isneginf(seen[0][:, 0, 0]), padding)  # -inf exactly at the padding
    assert not seen[0][:, 0, 0][~padding].any()  # 0 where attended
    assert not model.get_decoder()._forward_pre_hooks  # the hook is gone after the call


def test_the_bias_is_left_out_where_it_could_differ():
    """Under autocast, or with encoder states of another dtype, the decoder keeps the 2-D mask."""
    from pmi_decode.generation import CrossAttentionBias

    model, _ = setup("bart", dtype=torch.float32)
    bias = CrossAttentionBias(model)
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    states = torch.zeros(2, 3, model.config.d_model)
    assert bias._swap(None, (), {"encoder_attention_mask": mask, "encoder_hidden_states": states}) is not None
    assert bias._swap(None, (), {"encoder_attention_mask": mask, "encoder_hidden_states": states.double()}) is None
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert bias._swap(None, (), {"encoder_attention_mask": mask, "encoder_hidden_states": states}) is None
    assert CrossAttentionBias(setup("llama", dtype=torch.float32)[0]).decoder is None  # decoder-only: no hook
