"""pmi_generate(packed=True): both halves in one row give the separate path's tokens in every
mode (greedy, beam, sampling, beam sampling), hold the document-free half at its own length in
the cache, and refuse what they cannot run."""

import pytest
import torch
from reference import reference_for
from test_generation import separate
from test_generation import setup as setup_generation
from tiny_models import DIALOGUES, tiny_tokenizer

from pmi_decode import PMIDecode, build_inputs, pmi_generate

NEW = dict(max_new_tokens=8, min_new_tokens=4)
MODES = {
    "greedy": dict(),
    "beam": dict(num_beams=4, num_return_sequences=2, length_penalty=0.7),
    "sampling": dict(do_sample=True, top_k=0, num_return_sequences=2),
    "beam-sampling": dict(do_sample=True, num_beams=3, num_return_sequences=2),
}


def setup(kind, attention=None):
    model, inputs = setup_generation(kind)
    if attention is not None:
        model.set_attn_implementation(attention)
    return model, inputs


@pytest.mark.exactness
@pytest.mark.parametrize("kind", ["llama", "gpt2"])
@pytest.mark.parametrize("mode", sorted(MODES))
def test_packed_equals_separate(kind, mode):
    model, inputs = setup(kind)
    options = dict(**NEW, **MODES[mode])
    expected = separate(model, inputs, 0.5, 0.9, **options)
    torch.manual_seed(0)
    got = pmi_generate(model, inputs, alpha=0.5, p=0.9, packed=True, **options)
    assert torch.equal(got, expected)
    assert "forward" not in vars(model)  # the wrapper is gone after the call


@pytest.mark.exactness
@pytest.mark.parametrize("kind", ["llama", "gpt2"])
@pytest.mark.parametrize("mode", ["greedy", "beam", "sampling"])
def test_packed_equals_the_slow_reference(kind, mode):
    """Against the processor that re-runs every row's document-free sequence from scratch."""
    model, inputs = setup(kind)
    options = dict(**NEW, **MODES[mode])
    ref = reference_for(model, inputs)
    torch.manual_seed(0)
    expected = model.generate(**inputs["conditional"], logits_processor=[ref], **options)
    torch.manual_seed(0)
    got = pmi_generate(model, inputs, alpha=0.5, p=0.9, packed=True, **options)
    assert torch.equal(got, expected)
    assert not torch.equal(got, model.generate(**inputs["conditional"], **options))


@pytest.mark.parametrize("kind, attention, why", [
    ("bloom", None, "takes no position_ids"),
    ("llama", "eager", "attention implementation 'eager'"),
    ("bart", None, "an encoder-decoder model"),
])
def test_models_the_packed_path_cannot_run_are_refused(kind, attention, why):
    model, inputs = setup(kind, attention)
    with pytest.raises(ValueError, match=f"the packed path cannot be used here: .*{why}"):
        pmi_generate(model, inputs, alpha=0.5, p=0.9, packed=True, **NEW)


def test_sliding_window_layers_are_refused():
    """Gemma 3 (the embedded Gemma model's family) mixes sliding-window layers into its cache."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    config = Gemma3TextConfig(vocab_size=320, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                              num_attention_heads=2, num_key_value_heads=1, head_dim=16, sliding_window=8,
                              layer_types=["sliding_attention", "full_attention"], pad_token_id=0, bos_token_id=1,
                              eos_token_id=2, attn_implementation="sdpa")
    model = Gemma3ForCausalLM(config).eval()
    tok = tiny_tokenizer("llama")
    inputs = build_inputs(tok, [d for d, _ in DIALOGUES], [h for _, h in DIALOGUES], model=model)
    with pytest.raises(ValueError, match="the packed path cannot be used here: the model's cache has sliding-window"):
        pmi_generate(model, inputs, alpha=0.5, p=0.9, packed=True, **NEW)


@pytest.mark.parametrize("options, why", [
    (dict(cache_implementation="static"), "cache_implementation='static'"),
    (dict(output_attentions=True, return_dict_in_generate=True), "output_attentions=True"),
    (dict(prompt_lookup_num_tokens=3), "prompt_lookup_num_tokens=3"),
])
def test_options_the_packed_path_cannot_run_are_refused(options, why):
    model, inputs = setup("llama")
    with pytest.raises(ValueError, match=f"the packed path cannot be used here: {why}"):
        pmi_generate(model, inputs, alpha=0.5, p=0.9, packed=True, **NEW, **options)
    with pytest.raises(ValueError, match="leave paired unset"):
        pmi_generate(model, inputs, alpha=0.5, p=0.9, packed=True, paired=True, **NEW)


def test_the_document_free_half_holds_its_own_length():
    """The cache's positions are the conditional prompt's, the document-free prompt's and two a
    step, not twice the conditional prompt's (the paired batch's); the output drops that cache."""
    model, inputs = setup("llama")
    seen = []
    original = PMIDecode._packed_step

    def spy(self, input_ids, *args, **kwargs):
        seen.append((input_ids.shape[1], self._packed.allowed.shape[-1]))
        return original(self, input_ids, *args, **kwargs)

    PMIDecode._packed_step = spy
    try:
        out = pmi_generate(model, inputs, alpha=0.5, p=0.9, packed=True, max_new_tokens=4,
                           return_dict_in_generate=True)
    finally:
        PMIDecode._packed_step = original
    width_c = inputs["conditional"]["input_ids"].shape[1]
    width_u = int(inputs["unconditional"]["attention_mask"].sum(-1).max())
    assert width_u < width_c
    assert seen[0] == (width_c, width_c + inputs["unconditional"]["input_ids"].shape[1])
    assert [cache - seen[0][1] for _, cache in seen] == [2 * step for step in range(len(seen))]
    assert out.get("past_key_values") is None and out.get("cache") is None


def test_user_processors_run_on_the_packed_path():
    model, inputs = setup("gpt2")
    proc_calls = []

    class Counting:
        """A user processor that records each step it sees."""
        def __call__(self, input_ids, scores):
            proc_calls.append(1)
            return scores

    out = pmi_generate(model, inputs, alpha=0.5, p=0.9, packed=True, logits_processor=[Counting()], **NEW)
    assert proc_calls and out.shape[0] == inputs["conditional"]["input_ids"].shape[0]


def test_sequences_not_of_the_packed_step_are_refused():
    """PMIDecode asks for the document-free logits of sequences no packed step ran: refused."""
    from pmi_decode.packed import PackedRows

    model, inputs = setup("gpt2")
    rows = PackedRows(model, inputs["conditional"], inputs["unconditional"], 1)
    with pytest.raises(ValueError, match="not those of the step the model just ran"):
        rows.unconditional_logits(inputs["conditional"]["input_ids"])


def grouped_attention_case(rows: int, kv_heads: int, groups: int, positions: int, seed: int, masks: int = 1):
    """transformers' sdpa attention, an attention module with ``groups`` query heads per key/value
    head, and float64 queries, keys, values and boolean two-query masks (each query sees something)."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    module = torch.nn.Module()
    module.num_key_value_groups, module.is_causal, module.training = groups, True, False
    generator = torch.Generator().manual_seed(seed)
    query = torch.randn(rows, kv_heads * groups, 2, 8, generator=generator, dtype=torch.float64)
    key, value = (torch.randn(rows, kv_heads, positions, 8, generator=generator, dtype=torch.float64)
                  for _ in range(2))
    made = [torch.rand(rows, 1, 2, positions, generator=generator) > 0.5 for _ in range(masks)]
    for mask in made:
        mask[..., 0] = True
    return ALL_ATTENTION_FUNCTIONS["sdpa"], module, query, key, value, made


def test_grouped_query_step_equals_transformers_sdpa():
    """The packed step's attention for grouped-query models reads the cache without repeating
    key/value heads, and gives transformers' own result (which repeats them)."""
    from pmi_decode.packed import grouped_query_step

    original, module, query, key, value, (mask,) = grouped_attention_case(5, 2, 3, 11, seed=0)
    got, _ = grouped_query_step(original)(module, query, key, value, mask, scaling=0.3)
    expected, _ = original(module, query, key, value, mask, scaling=0.3)
    assert got.shape == expected.shape == (5, 2, 6, 8)
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)
    # a wrong head grouping would not be equal: the test can fail
    shuffled, _ = grouped_query_step(original)(module, query[:, [1, 0, 2, 3, 4, 5]], key, value, mask, scaling=0.3)
    assert not torch.allclose(shuffled, expected)


def test_grouped_query_step_makes_the_grouped_mask_once_per_mask():
    """One step's layers share its mask, so its grouped copy is made once; a new mask (the next
    step's, even of the same shape) or a shorter cache is never served the old copy."""
    from pmi_decode.packed import grouped_query_step

    original, module, query, key, value, masks = grouped_attention_case(3, 2, 2, 9, seed=1, masks=2)
    step = grouped_query_step(original)
    repeats = []
    real_repeat = torch.Tensor.repeat

    def counting(self, *sizes):
        repeats.append(sizes)
        return real_repeat(self, *sizes)

    torch.Tensor.repeat = counting
    try:
        first = [step(module, query, key, value, masks[0], scaling=0.3)[0] for _ in range(3)]
        second, _ = step(module, query, key, value, masks[1], scaling=0.3)
        short, _ = step(module, query, key[..., :7, :], value[..., :7, :], masks[1], scaling=0.3)
    finally:
        torch.Tensor.repeat = real_repeat
    assert len(repeats) == 3  # once for each (mask, cache width), not once per call
    for got in first:
        torch.testing.assert_close(got, original(module, query, key, value, masks[0], scaling=0.3)[0])
    torch.testing.assert_close(second, original(module, query, key, value, masks[1], scaling=0.3)[0])
    expected_short, _ = original(module, query, key[..., :7, :], value[..., :7, :], masks[1][..., :7], scaling=0.3)
    torch.testing.assert_close(short, expected_short)
    assert not torch.allclose(second, first[0])


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
def test_additive_mask_step_equals_sdpa_with_the_boolean_mask(dtype):
    """The packed step hands attention the additive mask torch would make of the boolean one:
    the same numbers, bit for bit, made once per mask and dtype (once per step, not per layer)."""
    from pmi_decode.packed import additive_mask_step

    original, module, query, key, value, masks = grouped_attention_case(3, 4, 1, 9, seed=2, masks=2)
    query, key, value = (t.to(dtype) for t in (query, key, value))
    seen = []

    def spy(module, query, key, value, attention_mask, *args, **kwargs):
        seen.append(attention_mask)
        return original(module, query, key, value, attention_mask, *args, **kwargs)

    step = additive_mask_step(spy)
    for mask in masks:
        for _ in range(3):  # three layers of one step
            got, _ = step(module, query, key, value, mask, scaling=0.3)
            expected, _ = original(module, query, key, value, mask, scaling=0.3)
            assert torch.equal(got, expected)
    assert all(m.dtype == dtype for m in seen)
    assert len({id(m) for m in seen}) == 2  # one additive mask per boolean mask
    # the additive mask hides what the boolean mask hides: a mask with one position opened differs
    opened = masks[0].clone()
    opened[0, 0, 0, (~opened[0, 0, 0]).nonzero()[0]] = True
    assert not torch.equal(step(module, query, key, value, opened, scaling=0.3)[0],
                           original(module, query, key, value, masks[0], scaling=0.3)[0])


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_the_packed_step_hands_attention_a_float_mask(kind, monkeypatch):
    """Every two-token step's attention gets the float mask made once per step (torch would
    otherwise convert the boolean mask in every layer); the tokens stay the separate path's.
    With the beams' prompt positions held once a row each (a GPU's default, for now)."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    import pmi_decode.packed as packed

    monkeypatch.setattr(packed, "SHARED_ON", ())
    model, inputs = setup(kind)
    masks = []
    real = packed.additive_mask_step

    def watching(original):
        def spy(module, query, key, value, attention_mask, *args, **kwargs):
            masks.append(attention_mask)
            return original(module, query, key, value, attention_mask, *args, **kwargs)
        return real(spy)

    packed.additive_mask_step = watching
    try:
        got = pmi_generate(model, inputs, alpha=0.5, p=0.9, packed=True, num_beams=2, **NEW)
    finally:
        packed.additive_mask_step = real
    assert masks and all(m.is_floating_point() for m in masks)
    layers = model.config.num_hidden_layers if kind == "llama" else model.config.n_layer
    assert len({id(m) for m in masks}) <= len(masks) // layers  # shared by the layers of a step
    assert torch.equal(got, separate(model, inputs, 0.5, 0.9, num_beams=2, **NEW))


def test_the_packed_step_uses_the_grouped_attention_and_restores_sdpa(monkeypatch):
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    import pmi_decode.packed as packed

    monkeypatch.setattr(packed, "SHARED_ON", ())  # the grouped attention serves the rows that hold their prompt
    model, inputs = setup("llama")  # 4 query heads over 2 key/value heads
    calls = []
    real = packed.grouped_query_step

    def counting(original):
        inner = real(original)

        def attention(module, query, *args, **kwargs):
            calls.append(query.shape[2])
            return inner(module, query, *args, **kwargs)
        return attention

    before = ALL_ATTENTION_FUNCTIONS["sdpa"]
    packed.grouped_query_step = counting
    try:
        got = pmi_generate(model, inputs, alpha=0.5, p=0.9, packed=True, num_beams=2, **NEW)
    finally:
        packed.grouped_query_step = real
    assert calls and set(calls) == {2}  # the two-token steps only, every layer
    assert ALL_ATTENTION_FUNCTIONS["sdpa"] is before and "sdpa" not in ALL_ATTENTION_FUNCTIONS._local_mapping
    assert torch.equal(got, separate(model, inputs, 0.5, 0.9, num_beams=2, **NEW))


@pytest.mark.exactness
@pytest.mark.parametrize("mode", [dict(num_beams=3), dict(do_sample=True)])
def test_packed_output_dict_equals_the_separate_paths(mode):
    """Scores and sequence scores come back as the separate path's (generate sees the same rows);
    sampling with output_scores too, which the paired path leaves to the separate one."""
    model, inputs = setup("llama")
    options = dict(num_return_sequences=2, return_dict_in_generate=True, output_scores=True, **mode, **NEW)
    ref = separate(model, inputs, 0.5, 0.9, **options)
    torch.manual_seed(0)
    out = pmi_generate(model, inputs, alpha=0.5, p=0.9, packed=True, **options)
    assert torch.equal(out.sequences, ref.sequences)
    if "num_beams" in mode:
        torch.testing.assert_close(out.sequences_scores, ref.sequences_scores)
    assert len(out.scores) == len(ref.scores)
    for got, expected in zip(out.scores, ref.scores):
        torch.testing.assert_close(got, expected)


@pytest.mark.exactness
@pytest.mark.parametrize("kind", ["llama", "gpt2"])
@pytest.mark.parametrize("mode", ["greedy", "beam", "sampling"])
@pytest.mark.parametrize("buffered", [False, True])
def test_both_cache_appends_give_the_separate_paths_tokens(kind, mode, buffered, monkeypatch):
    """The cache buffered (pmi_decode.packed.buffered_update, the CPU's default) and concatenated
    by transformers (contiguous_update, a GPU's), each against the separate path, whatever the
    test device's default is."""
    import pmi_decode.packed

    model, inputs = setup(kind)
    device = model.device.type
    monkeypatch.setattr(pmi_decode.packed, "BUFFERED_ON", (device,) if buffered else ())
    calls = []
    monkeypatch.setattr(pmi_decode.packed, "buffered_update",
                        lambda cache, real=pmi_decode.packed.buffered_update: (calls.append(1), real(cache))[1])
    options = dict(**MODES[mode], **NEW)
    torch.manual_seed(0)
    ref = separate(model, inputs, 0.5, 0.9, **options)
    torch.manual_seed(0)
    got = pmi_generate(model, inputs, alpha=0.5, p=0.9, packed=True, **options)
    assert torch.equal(got, ref)
    assert bool(calls) == buffered


@pytest.mark.parametrize("kind", ["llama", "gpt2"])
def test_the_packed_step_appends_contiguous_keys_and_values(kind, monkeypatch):
    """Where the cache is not buffered (a GPU, for now), the two-position step's keys and values
    reach the cache contiguous (torch.cat over a transposed view copies the whole cache with a slow
    kernel on a GPU), and the tokens stay the separate path's."""
    from transformers.cache_utils import DynamicLayer

    import pmi_decode.packed

    monkeypatch.setattr(pmi_decode.packed, "BUFFERED_ON", ())
    model, inputs = setup(kind)
    seen = []
    original = DynamicLayer.update

    def spy(self, key_states, value_states, *args, **kwargs):
        if key_states.shape[-2] == 2:  # the packed step's two positions
            seen.append(key_states.is_contiguous() and value_states.is_contiguous())
        return original(self, key_states, value_states, *args, **kwargs)

    DynamicLayer.update = spy
    try:
        got = pmi_generate(model, inputs, alpha=0.5, p=0.9, packed=True, num_beams=2, **NEW)
    finally:
        DynamicLayer.update = original
    assert seen and all(seen)
    assert torch.equal(got, separate(model, inputs, 0.5, 0.9, num_beams=2, **NEW))


@pytest.mark.parametrize("own_update", [False, True])
def test_contiguous_update_hands_on_contiguous_views_and_holds_the_cache_weakly(own_update):
    """The wrapped update gets contiguous keys and values with everything else as given, through
    the class's method or a function already set on the instance; the class's method is reached
    through a weak reference, so the cache does not keep itself alive."""
    import gc
    import weakref

    from pmi_decode.packed import contiguous_update

    seen = []

    class Cache:
        def update(self, key_states, value_states, layer_idx, cache_kwargs=None):
            seen.append((self, key_states.is_contiguous(), value_states.is_contiguous(), layer_idx, cache_kwargs))
            return key_states, value_states

    cache = Cache()
    if own_update:
        cache.update = lambda k, v, layer_idx, cache_kwargs=None: Cache.update(cache, k, v, layer_idx, cache_kwargs)
    contiguous_update(cache)
    view = torch.randn(2, 2, 3, 4).transpose(1, 2)  # [rows, heads, positions, dim] as transformers hands it
    assert not view.is_contiguous()
    keys, values = cache.update(view, view, 5, cache_kwargs={"x": 1})
    assert seen == [(cache, True, True, 5, {"x": 1})] and torch.equal(keys, view)
    if not own_update:  # the lambda above holds the cache itself, as such a function may
        gc.disable()
        try:
            ref = weakref.ref(cache)
            del cache, seen[:]
            assert ref() is None  # freed at once, without a garbage collection
        finally:
            gc.enable()


def test_buffered_update_equals_concatenation_and_copies_the_cache_only_when_it_grows():
    """Each step's returned keys and values are those torch.cat would give; the layer holds a view
    of a buffer that is replaced only when it runs out of room (or when something replaced the
    layer's keys, as transformers' whole-cache reorder does), and the cache is freed at once."""
    import gc
    import weakref

    from transformers import DynamicCache

    from pmi_decode.packed import GROWTH, buffered_update

    torch.manual_seed(0)
    cache = DynamicCache()
    keys, values = torch.randn(3, 2, 40, 4), torch.randn(3, 2, 40, 4)
    cache.update(keys, values, 0)
    buffered_update(cache)
    buffers = set()
    for step in range(3 * GROWTH):
        new_k, new_v = torch.randn(3, 2, 2, 4), torch.randn(3, 2, 2, 4)
        k_view, v_view = new_k.transpose(1, 2).contiguous().transpose(1, 2), new_v  # a strided view and a plain one
        got_k, got_v = cache.update(k_view, v_view, 0)
        keys, values = torch.cat([keys, new_k], dim=-2), torch.cat([values, new_v], dim=-2)
        assert torch.equal(got_k, keys) and torch.equal(got_v, values)
        assert cache.layers[0].keys is got_k and cache.get_seq_length() == keys.shape[-2]
        buffers.add(got_k.untyped_storage().data_ptr())
        if step == GROWTH:  # a reorder that replaces the layer's tensors, as transformers' own does
            order = torch.tensor([2, 0, 1])
            cache.layers[0].keys = cache.layers[0].keys.index_select(0, order)
            cache.layers[0].values = cache.layers[0].values.index_select(0, order)
            keys, values = keys[order], values[order]
    assert 2 <= len(buffers) <= 2 + 3 * GROWTH * 2 // GROWTH  # a few growths, not one copy a step
    gc.disable()
    try:
        ref = weakref.ref(cache)
        del cache, got_k, got_v
        assert ref() is None
    finally:
        gc.enable()


@pytest.mark.parametrize("how", ["own update", "offloading"])
def test_buffered_update_leaves_an_update_that_does_more_than_append(how, monkeypatch):
    """A cache whose update is already someone's function, or which offloads its layers (in its
    class's update), keeps that update, handed contiguous keys and values: nothing it does is skipped."""
    from transformers import DynamicCache

    from pmi_decode.packed import buffered_update

    cache = DynamicCache()
    cache.update(torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 4), 0)
    seen = []

    def spy(*args):
        key, value, layer_idx = args[-3:]
        seen.append((key.is_contiguous(), layer_idx))
        return key, value

    if how == "own update":
        cache.update = lambda k, v, layer_idx: spy(k, v, layer_idx)
    else:
        cache.offloading = True
        monkeypatch.setattr(DynamicCache, "update", spy)  # stands for the offloading update, CUDA streams and all
    buffered_update(cache)
    step = torch.randn(1, 2, 2, 4).transpose(1, 2).contiguous().transpose(1, 2)  # the packed step's strided view
    cache.update(step, step, 0)
    assert seen == [(True, 0)] and cache.layers[0].keys.shape[-2] == 3


def test_the_generated_positions_reorder_equals_a_whole_reorder_and_refuses_other_prompts():
    """Where each prompt's rows share their prompt positions, moving only the generated positions
    gives the cache a whole reorder gives; a parent from another prompt is refused."""
    from transformers import DynamicCache

    from pmi_decode.packed import CROSS_PROMPT_PARENT, generated_positions_reorder
    from pmi_decode.paired import StepChecks

    prompts, group, heads, width, generated, dim = 2, 3, 2, 5, 4, 8
    generator = torch.Generator().manual_seed(0)

    def layer_states():
        shared = torch.randn(prompts, heads, width, dim, generator=generator).repeat_interleave(group, dim=0)
        return torch.cat([shared, torch.randn(prompts * group, heads, generated, dim, generator=generator)], dim=-2)

    states = [(layer_states(), layer_states()) for _ in range(3)]
    whole, ours = DynamicCache(), DynamicCache()
    for index, (keys, values) in enumerate(states):
        whole.update(keys.clone(), values.clone(), index)
        ours.update(keys.clone(), values.clone(), index)
    generated_positions_reorder(ours, width, group, StepChecks())
    beam_idx = torch.tensor([2, 2, 0, 4, 3, 3])  # parents within each prompt's three rows
    whole.reorder_cache(beam_idx)
    ours.reorder_cache(beam_idx)
    for expected, got in zip(whole.layers, ours.layers):
        assert torch.equal(got.keys, expected.keys) and torch.equal(got.values, expected.values)
    assert not torch.equal(whole.layers[0].keys, states[0][0])  # the reorder moved something
    with pytest.raises(ValueError, match="another prompt"):
        ours.reorder_cache(torch.tensor([0, 1, 3, 3, 4, 5]))  # row 2 takes a parent of the second prompt
    assert "packed=False" in CROSS_PROMPT_PARENT


def test_packed_beam_search_never_moves_the_whole_cache(monkeypatch):
    """generate's beam search reorders through the packed cache's own reorder (so the speed-up is
    not lost silently if transformers changes how it reorders), and the tokens stay exact."""
    from transformers.cache_utils import DynamicLayer

    model, inputs = setup("llama")
    whole = []
    real = DynamicLayer.reorder_cache
    monkeypatch.setattr(DynamicLayer, "reorder_cache", lambda self, beam_idx: whole.append(1) or real(self, beam_idx))
    options = dict(**NEW, **MODES["beam"])
    got = pmi_generate(model, inputs, alpha=0.5, p=0.9, packed=True, **options)
    assert whole == []
    expected = separate(model, inputs, 0.5, 0.9, **options)
    assert whole  # the separate path's plain cache does reorder through it: the spy works
    assert torch.equal(got, expected)


def _packed_calls(monkeypatch) -> list:
    """Records each call that took the packed path (PackedRows installed), and runs it as it is."""
    from pmi_decode.packed import PackedRows

    calls, original = [], PackedRows.installed

    def installed(self):
        calls.append(self)
        return original(self)

    monkeypatch.setattr(PackedRows, "installed", installed)
    return calls


@pytest.mark.parametrize("kind, mode, expected", [
    ("llama", "greedy", True), ("gpt2", "beam", True), ("llama", "beam-sampling", True),
    ("bart", "greedy", False),  # encoder-decoder: the paired path
])
def test_the_default_takes_the_packed_path_wherever_the_call_can(monkeypatch, kind, mode, expected):
    """packed=None (the default) is the packed path for decoder-only models on any device, with the
    packed path's tokens; an explicit paired=True, packed=False or alpha 0 stays off it."""
    model, inputs = setup(kind)
    options = dict(**NEW, **MODES[mode])
    calls = _packed_calls(monkeypatch)
    torch.manual_seed(0)
    default = pmi_generate(model, inputs, alpha=0.5, p=0.9, **options)
    assert len(calls) == int(expected)
    if expected:
        torch.manual_seed(0)
        assert torch.equal(default, pmi_generate(model, inputs, alpha=0.5, p=0.9, packed=True, **options))
    calls.clear()
    pmi_generate(model, inputs, alpha=0.5, p=0.9, packed=False, **options)
    pmi_generate(model, inputs, alpha=0.0, p=0.9, **options)
    if mode != "beam-sampling":  # the paired path cannot run beam sampling
        pmi_generate(model, inputs, alpha=0.5, p=0.9, paired=True, **options)
    assert calls == []


def test_the_default_stays_off_the_packed_path_where_an_option_blocks_it(monkeypatch):
    """A cache of generate's own making has room for plain decoding only: the default goes on to
    the paired path (no error), where packed=True says why it cannot."""
    model, inputs = setup("llama")
    calls = _packed_calls(monkeypatch)
    options = dict(**NEW, cache_implementation="static")
    pmi_generate(model, inputs, alpha=0.5, p=0.9, **options)
    assert calls == []
    with pytest.raises(ValueError, match="cache_implementation"):
        pmi_generate(model, inputs, alpha=0.5, p=0.9, packed=True, **options)


@pytest.mark.parametrize("path", [dict(packed=True), dict(packed=False), dict(paired=False)])
@pytest.mark.parametrize("mode", ["greedy", "beam", "sampling"])
def test_no_cache_outlives_the_call(path, mode):
    """Every path frees its key/value cache when the call returns, without waiting for Python's
    garbage collector: a cache held in a reference cycle stays on the GPU until a collection, and
    the next call runs out of memory (GPU pass 6: plain decoding after the packed path, at a
    4k-token document)."""
    import gc

    from transformers import Cache

    model, inputs = setup("llama")

    def caches():
        return sum(isinstance(o, Cache) for o in gc.get_objects())

    gc.collect()
    gc.disable()
    try:
        before = caches()
        torch.manual_seed(0)
        pmi_generate(model, inputs, alpha=0.5, p=0.9, **path, **NEW, **MODES[mode])
        left = caches() - before
    finally:
        gc.enable()
    assert left == 0


@pytest.mark.parametrize("share", [False, True])
def test_the_prefill_releases_each_document_free_layer_once_joined(share, monkeypatch):
    """The prefill joins the conditional and the document-free caches a layer at a time; each
    document-free layer is released as soon as it is joined, so at most the layers not yet joined
    are held beside the joined ones. Holding the whole document-free cache to the end of the join
    made the prefill the call's peak (a GPU run's 0.5k-token row: 32 rows x 258 positions, 1.5 GB)."""
    import weakref

    import pmi_decode.packed as packed

    model, inputs = setup("llama")
    monkeypatch.setattr(packed, "SHARED_ON", (model.device.type,) if share else ())
    real_prefill, real_cat = packed.prefill, torch.cat
    document_free, alive_at_join = [], []

    def recording_prefill(*args, **kwargs):
        cache, logits = real_prefill(*args, **kwargs)
        document_free.extend(weakref.ref(layer.keys) for layer in cache.layers)
        return cache, logits

    def watching_cat(tensors, *args, **kwargs):
        if any(ref() is t for ref in document_free for t in tensors):  # a join of one layer's keys
            alive_at_join.append(sum(ref() is not None for ref in document_free))
        return real_cat(tensors, *args, **kwargs)

    monkeypatch.setattr(packed, "prefill", recording_prefill)
    monkeypatch.setattr(torch, "cat", watching_cat)
    got = pmi_generate(model, inputs, alpha=0.5, p=0.9, packed=True, num_beams=3, **NEW)
    monkeypatch.undo()
    layers = len(document_free)
    assert layers == model.config.num_hidden_layers > 1
    assert alive_at_join == list(range(layers, 0, -1))
    assert torch.equal(got, separate(model, inputs, 0.5, 0.9, num_beams=3, **NEW))
