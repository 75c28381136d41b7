"""What makes a paired beam-search step cheaper must not change it: the nucleus from a sort of
the values only (same set as torch.sort's), and the cross-attention cache left in place where
beam search's reordering cannot change it."""

import math

import pytest
import torch
from test_processor import MODES, NEW_TOKENS, setup
from transformers import DynamicCache

from pmi_decode import pmi_generate
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
