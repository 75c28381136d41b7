"""The paired path's beam search holding the cross-attention part once per prompt
(pmi_decode.cross_attention_cache): the regrouped attention equals transformers' own over whole
rows, the cache keeps one row per prompt after the first step, the tokens stay the same, and what
it cannot regroup or verify is left whole."""

import pytest
import torch
from test_generation import separate
from test_generation import setup as setup_generation
from test_model_families import FAMILIES
from test_model_families import setup as setup_family
from transformers.integrations.sdpa_attention import sdpa_attention_forward

import pmi_decode.cross_attention_cache as cross_attention_cache
from pmi_decode import pmi_generate
from pmi_decode.cross_attention_cache import GroupedCrossAttentionCache

NEW = dict(max_new_tokens=8, min_new_tokens=4)
#: encoder-decoder families whose cross-attention does not go through transformers' attention interface
BYPASSING = {"longt5"}


class _Module(torch.nn.Module):
    is_causal = False


def _cache_with_cross(prompts, beams, heads=2, keys=5, dim=4, seed=0):
    """A cache whose one cross-attention layer holds each prompt's keys and values in its rows."""
    model, _ = setup_generation("bart")
    cache = GroupedCrossAttentionCache(model, beams)
    gen = torch.Generator().manual_seed(seed)
    for index in range(len(cache.cross_attention_cache.layers)):  # the model's decoder layers
        cross = [torch.randn(prompts, heads, keys, dim, generator=gen, dtype=torch.float64)
                 .repeat_interleave(beams, 0) for _ in range(2)]
        cache.cross_attention_cache.update(*cross, index)
    return cache, gen


@pytest.mark.parametrize("mask", ["none", "rows", "one"])
@pytest.mark.parametrize("length", [1, 2])
def test_regrouped_cross_attention_equals_transformers_sdpa_over_whole_rows(mask, length):
    prompts, beams = 3, 4
    cache, gen = _cache_with_cross(prompts, beams)
    rows = prompts * beams
    layers = cache.cross_attention_cache.layers
    layer = layers[0]
    whole_keys, whole_values = layer.keys, layer.values
    query = torch.randn(rows, 2, length, 4, generator=gen, dtype=torch.float64)
    bias = {"none": None,
            "rows": torch.zeros(prompts, 1, length, 5, dtype=torch.float64).index_fill_(-1, torch.tensor([0, 3]),
                                                                                      -torch.inf)
            .repeat_interleave(beams, 0),
            "one": torch.randn(1, 2, length, 5, generator=gen, dtype=torch.float64)}[mask]
    expected, _ = sdpa_attention_forward(_Module(), query, whole_keys, whole_values, bias)
    attention = cache._attention(sdpa_attention_forward)
    cache._installed = True
    for other in layers[1:]:  # the other layers' first step
        attention(_Module(), query, other.keys, other.values, bias)
    before, _ = attention(_Module(), query, layer.keys, layer.values, bias)  # the first step holds it once at once
    torch.testing.assert_close(before, expected, rtol=1e-12, atol=1e-12)
    assert layer.keys.shape[0] == prompts and not cache.held_once
    cache.reorder_cache(torch.arange(rows))
    assert cache.held_once and layer.keys.shape[0] == prompts
    assert torch.equal(layer.keys, whole_keys[::beams])
    for held in (layer.keys, layer.values):  # the other rows' memory freed
        assert held.untyped_storage().nbytes() == held.numel() * held.element_size()
    got, weights = attention(_Module(), query, layer.keys, layer.values, bias)
    assert weights is None
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)


def test_a_mask_that_differs_within_a_prompt_keeps_the_rows_whole():
    prompts, beams = 2, 3
    cache, gen = _cache_with_cross(prompts, beams)
    layer = cache.cross_attention_cache.layers[0]
    query = torch.randn(prompts * beams, 2, 1, 4, generator=gen, dtype=torch.float64)
    bias = torch.zeros(prompts * beams, 1, 1, 5, dtype=torch.float64)
    bias[1, ..., 2] = -torch.inf  # the second beam of the first prompt sees less
    cache._installed = True
    attention = cache._attention(sdpa_attention_forward)
    for each in cache.cross_attention_cache.layers:  # every layer's first step comes through
        out, _ = attention(_Module(), query, each.keys, each.values, bias)
        torch.testing.assert_close(out, sdpa_attention_forward(_Module(), query, each.keys, each.values, bias)[0])
    cache.reorder_cache(torch.arange(prompts * beams))
    assert not cache.held_once and layer.keys.shape[0] == prompts * beams
    # the same with a mask equal within each prompt: held once
    cache, _ = _cache_with_cross(prompts, beams)
    cache._installed = True
    attention = cache._attention(sdpa_attention_forward)
    for each in cache.cross_attention_cache.layers:
        attention(_Module(), query, each.keys, each.values, torch.zeros_like(bias))
    cache.reorder_cache(torch.arange(prompts * beams))
    assert cache.held_once


def test_a_layer_that_did_not_come_through_gets_whole_rows_back_and_a_held_cache_refuses_other_parents():
    """A model one of whose cross-attention layers bypasses the interface: the layer held once in
    the first step is copied back to every row at the first reordering, and nothing is held after."""
    cache, gen = _cache_with_cross(2, 3)
    cache._installed = True
    layers = cache.cross_attention_cache.layers
    whole = [(layer.keys.clone(), layer.values.clone()) for layer in layers]
    query = torch.randn(6, 2, 1, 4, generator=gen, dtype=torch.float64)
    attention = cache._attention(sdpa_attention_forward)
    attention(_Module(), query, layers[0].keys, layers[0].values, None)  # only the first layer comes through
    assert layers[0].keys.shape[0] == 2
    cache.reorder_cache(torch.arange(6))
    assert not cache.held_once
    for layer, (keys, values) in zip(layers, whole):
        assert torch.equal(layer.keys, keys) and torch.equal(layer.values, values)
    cache, _ = _cache_with_cross(2, 3)  # every layer comes through: held once, and other parents refused
    cache._installed = True
    attention = cache._attention(sdpa_attention_forward)
    for layer in cache.cross_attention_cache.layers:
        attention(_Module(), query, layer.keys, layer.values, None)
    cache.reorder_cache(torch.arange(6))
    assert cache.held_once
    with pytest.raises(ValueError, match="parent row of another prompt.*share_prompt=False"):
        cache.reorder_cache(torch.tensor([0, 0, 0, 0, 0, 0]))


def _watch_held(monkeypatch):
    """Each reordering's (held once, cross-attention rows, each prompt's rows found equal where it
    was looked at as before) of the paired path's cache. Whether the rows come out of the model
    equal bit for bit depends on the matrix kernels (the same inputs at other row offsets); where
    they do not, nothing is held once."""
    seen = []
    real = GroupedCrossAttentionCache.reorder_cache

    def reorder(self, beam_idx):
        real(self, beam_idx)
        seen.append((self.held_once, self.cross_attention_cache.layers[0].keys.shape[0], self.cross_rows_equal))

    monkeypatch.setattr(GroupedCrossAttentionCache, "reorder_cache", reorder)
    return seen


@pytest.mark.exactness
@pytest.mark.parametrize("kind", ["bart", "t5"])
@pytest.mark.parametrize("held", [False, True])
@pytest.mark.parametrize("mode", [dict(num_beams=4), dict(num_beams=3, num_return_sequences=2, length_penalty=0.7)])
def test_beam_search_holds_the_cross_attention_once_per_prompt_with_the_same_tokens(kind, held, mode, monkeypatch):
    model, inputs = setup_generation(kind)
    monkeypatch.setattr(cross_attention_cache, "HELD_ONCE_ON", (model.device.type,) if held else ())
    seen = _watch_held(monkeypatch)
    options = dict(**NEW, **mode)
    got = pmi_generate(model, inputs, alpha=0.5, p=0.9, paired=True, **options)
    assert torch.equal(got, separate(model, inputs, 0.5, 0.9, **options))
    stacked = 2 * inputs["conditional"]["input_ids"].shape[0]  # the conditional and document-free prompts
    rows = stacked * mode["num_beams"]
    once = seen[0][0]
    assert seen and all(s[:2] == (once, stacked if once else rows) for s in seen)
    # held once unless not asked, or unless the model's rows came out unequal (then as before)
    assert once == held or (held and seen[0][2] is False)


@pytest.mark.parametrize("family", sorted(f for f, (config, *_) in FAMILIES.items() if config().is_encoder_decoder))
def test_families_hold_the_cross_attention_once_where_their_attention_allows(family, monkeypatch):
    model, inputs = setup_family(family)
    monkeypatch.setattr(cross_attention_cache, "HELD_ONCE_ON", (model.device.type,))
    seen = _watch_held(monkeypatch)
    options = dict(num_beams=4, **NEW)
    got = pmi_generate(model, inputs, alpha=0.5, p=0.9, paired=True, **options)
    assert torch.equal(got, separate(model, inputs, 0.5, 0.9, **options))
    if family in BYPASSING:
        assert seen and not any(held for held, *_ in seen)
    else:  # held once unless the model's rows came out unequal
        assert seen and all(held or equal is False for held, _, equal in seen)
