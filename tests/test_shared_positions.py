"""The packed path's beams sharing their prompt positions (pmi_decode.shared_positions): the
shared attention equals attention over whole rows, the cache holds each prompt once, the tokens
stay the separate path's, and a model whose attention bypasses transformers' interface is run over
whole rows or refused, never decoded wrong."""

import pytest
import torch
from test_generation import separate
from test_generation import setup as setup_generation
from test_model_families import FAMILIES, SLIDING
from test_model_families import setup as setup_family

import pmi_decode.packed as packed
from pmi_decode import pmi_generate
from pmi_decode.shared_positions import NOT_SERVED, SharedPositions

NEW = dict(max_new_tokens=8, min_new_tokens=4)
MODES = {
    "beam": dict(num_beams=4, num_return_sequences=2, length_penalty=0.7),
    "sampling": dict(do_sample=True, top_k=0, num_return_sequences=2),
    "beam-sampling": dict(do_sample=True, num_beams=3, num_return_sequences=2),
}
#: decoder-only families whose attention does not go through transformers' attention interface
BYPASSING = {"falcon"}


class _Layer(torch.nn.Module):
    def __init__(self, layer_idx):
        super().__init__()
        self.layer_idx = layer_idx


def _whole_row_sdpa(query, keys, values, mask, scaling):
    groups = query.shape[1] // keys.shape[1]
    keys, values = (t.repeat_interleave(groups, dim=1) for t in (keys, values))
    out = torch.nn.functional.scaled_dot_product_attention(query, keys, values, attn_mask=mask, scale=scaling)
    return out.transpose(1, 2)


def _case(prompts=2, k=3, kv_heads=2, groups=2, width=7, generated=4, dim=8, dtype=torch.float64, seed=0):
    """Random shared prompt positions with padding, and one step's queries and generated positions."""
    gen = torch.Generator().manual_seed(seed)
    rows, heads = prompts * k, kv_heads * groups
    keys = torch.randn(prompts, kv_heads, width, dim, generator=gen, dtype=dtype)
    values = torch.randn(prompts, kv_heads, width, dim, generator=gen, dtype=dtype)
    mask = torch.rand(prompts, 2, width, generator=gen) > 0.3
    mask[:, :, -1] = True  # every half sees a prompt position
    query = torch.randn(rows, heads, 2, dim, generator=gen, dtype=dtype)
    own_keys = torch.randn(rows, kv_heads, generated, dim, generator=gen, dtype=dtype)
    own_values = torch.randn(rows, kv_heads, generated, dim, generator=gen, dtype=dtype)
    own_mask = torch.rand(rows, 1, 2, generated, generator=gen) > 0.5
    return SharedPositions([keys], [values], mask, k), query, own_keys, own_values, own_mask


@pytest.mark.parametrize("groups", [1, 2])
@pytest.mark.parametrize("k", [1, 3])
@pytest.mark.parametrize("scaling", [None, 0.2])
def test_shared_attention_equals_attention_over_whole_rows(groups, k, scaling):
    shared, query, key, value, own_mask = _case(k=k, groups=groups)

    def never(*args, **kwargs):
        raise AssertionError("the shared attention handed the call on")

    out, weights = shared.attention(never)(_Layer(0), query, key, value, own_mask, scaling=scaling)
    keys, values, mask = shared.whole_rows(0, key, value, own_mask)
    expected = _whole_row_sdpa(query, keys, values, mask, scaling)
    assert weights is None and out.shape == expected.shape
    torch.testing.assert_close(out, expected, rtol=1e-12, atol=1e-12)
    assert shared.step_done() and not shared.step_done()  # the one layer served, then a new step


@pytest.mark.parametrize("width,k,generated,groups", [(8, 2, 4, 1), (12, 1, 4, 3)])
def test_shared_attention_where_its_mask_fills_whole_16_position_blocks(width, k, generated, groups):
    """The step's mask is laid out with its last dimension padded to a multiple of 16: here it
    needs none (prompt + rows x generated = 16)."""
    shared, query, key, value, own_mask = _case(k=k, groups=groups, width=width, generated=generated)
    out, _ = shared.attention(None)(_Layer(0), query, key, value, own_mask)
    keys, values, mask = shared.whole_rows(0, key, value, own_mask)
    torch.testing.assert_close(out, _whole_row_sdpa(query, keys, values, mask, None), rtol=1e-12, atol=1e-12)


def test_whole_rows_repeat_each_prompt_to_its_rows():
    shared, query, key, value, own_mask = _case(k=3)
    keys, values, mask = shared.whole_rows(0, key, value, own_mask)
    for row in range(6):
        assert torch.equal(keys[row, :, :7], shared.keys[0][row // 3])
        assert torch.equal(values[row, :, 7:], value[row])
        assert torch.equal(mask[row, 0, :, :7], shared.mask[row // 3])
        assert torch.equal(mask[row, 0, :, 7:], own_mask[row, 0])


@pytest.mark.parametrize("extra", [dict(softcap=30.0), dict(sinks=torch.zeros(4))])
def test_calls_it_does_not_split_get_whole_rows_and_the_original_attention(extra):
    shared, query, key, value, own_mask = _case()
    seen = []

    def original(module, query, keys, values, mask, dropout=0.0, scaling=None, is_causal=None, **kwargs):
        seen.append(kwargs)
        return _whole_row_sdpa(query, keys, values, mask, scaling), None

    out, _ = shared.attention(original)(_Layer(0), query, key, value, own_mask, **extra)
    keys, values, mask = shared.whole_rows(0, key, value, own_mask)
    assert seen == [extra]
    torch.testing.assert_close(out, _whole_row_sdpa(query, keys, values, mask, None))


def test_a_layer_it_cannot_place_is_refused_and_a_missed_layer_is_told():
    shared, query, key, value, own_mask = _case()
    shared.keys.append(shared.keys[0])  # a second layer that no attention call reaches
    shared.values.append(shared.values[0])
    attention = shared.attention(None)
    with pytest.raises(ValueError, match="did not go through transformers' attention interface"):
        attention(torch.nn.Module(), query, key, value, own_mask)  # no layer_idx
    attention(_Layer(0), query, key, value, own_mask)
    assert not shared.step_done()
    with pytest.raises(ValueError, match="mask of generated positions"):
        attention(_Layer(0), query, key, value, own_mask.float())


def _watch_shared(monkeypatch):
    """Every SharedPositions made, and each step's (rows, positions) of the first cache layer."""
    made, steps = [], []
    real_init, real_step = SharedPositions.__init__, packed.PackedRows._step

    def init(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        made.append(self)

    def step(self, kwargs):
        cache = kwargs[self.cache_keyword]
        out = real_step(self, kwargs)
        steps.append((tuple(cache.layers[0].keys.shape), cache.get_seq_length(), self.shared is not None))
        return out

    monkeypatch.setattr(SharedPositions, "__init__", init)
    monkeypatch.setattr(packed.PackedRows, "_step", step)
    return made, steps


@pytest.mark.exactness
@pytest.mark.parametrize("kind", ["llama", "gpt2"])
@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("shared", [False, True])
def test_shared_and_per_row_prompts_give_the_separate_paths_tokens(kind, mode, shared, monkeypatch):
    model, inputs = setup_generation(kind)
    monkeypatch.setattr(packed, "SHARED_ON", (model.device.type,) if shared else ())
    made, steps = _watch_shared(monkeypatch)
    options = dict(**NEW, **MODES[mode])
    expected = separate(model, inputs, 0.5, 0.9, **options)
    torch.manual_seed(0)
    got = pmi_generate(model, inputs, alpha=0.5, p=0.9, packed=True, **options)
    assert torch.equal(got, expected)
    assert len(made) == int(shared)
    if shared:
        prompts = inputs["conditional"]["input_ids"].shape[0]
        width = inputs["conditional"]["input_ids"].shape[1] + inputs["unconditional"]["input_ids"].shape[1]
        assert made[0].keys[0].shape[0] == prompts and made[0].width == width
        k = max(options.get("num_beams", 1), options["num_return_sequences"])
        # each row holds its generated positions only; the length still counts the shared prompt
        assert steps == [((prompts * k, made[0].keys[0].shape[1], 2 * n, made[0].keys[0].shape[-1]), width + 2 * n,
                          True) for n in range(1, len(steps) + 1)]


def test_share_prompt_false_holds_the_prompt_in_every_row(monkeypatch):
    model, inputs = setup_generation("llama")
    monkeypatch.setattr(packed, "SHARED_ON", (model.device.type,))
    made, steps = _watch_shared(monkeypatch)
    got = pmi_generate(model, inputs, alpha=0.5, p=0.9, packed=True, share_prompt=False, num_beams=3, **NEW)
    assert made == [] and steps and not any(on for *_, on in steps)
    assert torch.equal(got, separate(model, inputs, 0.5, 0.9, num_beams=3, **NEW))


def test_greedy_search_has_one_row_per_prompt_and_nothing_to_share(monkeypatch):
    model, inputs = setup_generation("llama")
    monkeypatch.setattr(packed, "SHARED_ON", (model.device.type,))
    made, _ = _watch_shared(monkeypatch)
    pmi_generate(model, inputs, alpha=0.5, p=0.9, packed=True, **NEW)
    assert made == []


@pytest.mark.parametrize("family", sorted(f for f, (config, *_) in FAMILIES.items()
                                          if f not in SLIDING and not config().is_encoder_decoder))
def test_families_share_the_prompt_where_their_attention_allows(family, monkeypatch):
    """Every decoder-only family whose attention goes through transformers' interface shares
    the prompt for the whole call; one that bypasses it (Falcon) has its first step run again over
    whole rows, and then decodes as before sharing; the tokens are the separate path's either way.
    A family that the installed transformers runs with another attention than sdpa (GPT-J ran
    eager under transformers 5.17, sdpa under 5.24) cannot take the packed path at all, and says so."""
    model, inputs = setup_family(family)
    monkeypatch.setattr(packed, "SHARED_ON", (model.device.type,))
    made, steps = _watch_shared(monkeypatch)
    options = dict(num_beams=4, **NEW)
    if model.config._attn_implementation != "sdpa":
        with pytest.raises(ValueError, match="the packed path cannot be used here: attention implementation"):
            pmi_generate(model, inputs, alpha=0.5, p=0.9, packed=True, **options)
        assert made == []
        return
    got = pmi_generate(model, inputs, alpha=0.5, p=0.9, packed=True, **options)
    assert torch.equal(got, separate(model, inputs, 0.5, 0.9, **options))
    assert len(made) == 1
    assert all(on for *_, on in steps) == (family not in BYPASSING)
    assert not any(on for *_, on in steps) == (family in BYPASSING)


def test_a_later_step_that_bypasses_the_shared_attention_is_refused(monkeypatch):
    """Proven on the first step, the shared attention must serve every later one: a step whose
    layers never reached it (here, its installation skipped) is refused, not decoded wrong."""
    model, inputs = setup_generation("llama")
    monkeypatch.setattr(packed, "SHARED_ON", (model.device.type,))
    real = packed._packed_step_attention
    calls = []

    def skipping_after_the_first(grouped, shared=None):
        calls.append(1)
        return real(grouped, shared if len(calls) == 1 else None)

    monkeypatch.setattr(packed, "_packed_step_attention", skipping_after_the_first)
    with pytest.raises(ValueError, match="did not go through transformers' attention interface"):
        pmi_generate(model, inputs, alpha=0.5, p=0.9, packed=True, num_beams=3, **NEW)
    assert len(calls) == 2
    assert NOT_SERVED.endswith("share_prompt=False")


def test_a_first_step_that_fails_on_the_split_cache_runs_again_over_whole_rows(monkeypatch):
    """A model whose attention raises on the shared prompt (here, the shared attention made to)
    has its first step run again with the prompt copied back to every row: the separate path's
    tokens, and no shared positions for the rest of the call."""
    model, inputs = setup_generation("gpt2")
    monkeypatch.setattr(packed, "SHARED_ON", (model.device.type,))
    made, steps = _watch_shared(monkeypatch)

    def failing(self, original):
        def attention(*args, **kwargs):
            raise RuntimeError("this model's attention cannot read a split cache")
        return attention

    monkeypatch.setattr(SharedPositions, "attention", failing)
    got = pmi_generate(model, inputs, alpha=0.5, p=0.9, packed=True, num_beams=3, **NEW)
    assert torch.equal(got, separate(model, inputs, 0.5, 0.9, num_beams=3, **NEW))
    assert len(made) == 1 and steps and not any(on for *_, on in steps)
    width = inputs["conditional"]["input_ids"].shape[1] + inputs["unconditional"]["input_ids"].shape[1]
    assert [length for _, length, _ in steps] == [width + 2 * n for n in range(1, len(steps) + 1)]
