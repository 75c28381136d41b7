"""pmi_generate: the paired path equals the separate-cache path; beam sampling falls back to it."""

import math

import pytest
import torch
from tiny_models import DIALOGUES, PEAKED, tiny_model, tiny_tokenizer

from pmi_decode import PMIDecode, build_inputs, pmi_generate
from pmi_decode.generation import paired_path_blocker, prompt_cache
from pmi_decode.model_calls import cache_keyword

NEW = dict(max_new_tokens=8, min_new_tokens=4)


def setup(kind):
    tok, model = tiny_tokenizer(kind), tiny_model(kind, logit_scale=PEAKED[kind])
    docs, hists = [d for d, _ in DIALOGUES], [h for _, h in DIALOGUES]
    return model, build_inputs(tok, docs, hists, model=model)


def separate(model, inputs, alpha, p, seed=0, **kwargs):
    torch.manual_seed(seed)
    proc = PMIDecode(alpha, p, model=model, unconditional_inputs=inputs["unconditional"])
    return model.generate(**inputs["conditional"], logits_processor=[proc], **kwargs)


@pytest.mark.exactness
@pytest.mark.parametrize("kind", ["bart", "llama", "gpt2", "t5"])
@pytest.mark.parametrize("mode", [dict(), dict(num_beams=4, num_return_sequences=2, length_penalty=0.7)])
def test_paired_equals_separate(kind, mode):
    model, inputs = setup(kind)
    expected = separate(model, inputs, 0.5, 0.9, **NEW, **mode)
    got = pmi_generate(model, inputs, alpha=0.5, p=0.9, paired=True, **NEW, **mode)
    assert torch.equal(got, expected)
    assert not torch.equal(got, model.generate(**inputs["conditional"], **NEW, **mode))


@pytest.mark.exactness
def test_paired_moves_generate_processors_to_the_conditional_half():
    """BART checkpoints ship forced BOS/EOS and no-repeat n-grams; the paired path keeps them exact."""
    model, inputs = setup("bart")
    opts = dict(num_beams=4, forced_bos_token_id=5, forced_eos_token_id=2, no_repeat_ngram_size=2, min_length=3)
    expected = separate(model, inputs, 1.0, 0.8, max_new_tokens=8, **opts)
    got = pmi_generate(model, inputs, alpha=1.0, p=0.8, paired=True, max_new_tokens=8, pmi_cap=math.inf, **opts)
    assert torch.equal(got, expected)
    assert (got[:, 1] == 5).all()


def test_paired_output_dict_holds_the_conditional_rows():
    model, inputs = setup("llama")
    out = pmi_generate(
        model, inputs, alpha=0.5, p=0.9, paired=True, num_beams=4, num_return_sequences=2,
        return_dict_in_generate=True, output_scores=True, **NEW,
    )
    ref = separate(model, inputs, 0.5, 0.9, num_beams=4, num_return_sequences=2, return_dict_in_generate=True, output_scores=True, **NEW)
    assert torch.equal(out.sequences, ref.sequences)
    assert out.sequences_scores.shape == ref.sequences_scores.shape
    torch.testing.assert_close(out.sequences_scores, ref.sequences_scores)
    assert len(out.scores) == len(ref.scores) and out.scores[0].shape == ref.scores[0].shape


@pytest.mark.exactness
def test_beam_sampling_falls_back_to_the_separate_path():
    """Sampling runs paired (tests/test_paired_sampling.py); beam sampling does not."""
    model, inputs = setup("llama")
    mode = dict(do_sample=True, num_beams=3, num_return_sequences=2)
    torch.manual_seed(0)
    got = pmi_generate(model, inputs, alpha=0.5, p=0.9, **NEW, **mode)
    assert torch.equal(got, separate(model, inputs, 0.5, 0.9, **NEW, **mode))
    with pytest.raises(ValueError, match="beam sampling draws each half's beams independently"):
        pmi_generate(model, inputs, alpha=0.5, p=0.9, paired=True, **NEW, **mode)


@pytest.mark.exactness
@pytest.mark.parametrize("kind", ["llama", "bart"])
def test_alpha_zero_runs_one_branch_only(kind):
    """At alpha = 0 the score is the conditional log-prob, so pmi_generate must not pay for a
    doubled batch: the model sees the conditional rows only, and the tokens are the separate
    path's (plain decoding inside the top-p nucleus)."""
    model, inputs = setup(kind)
    rows = inputs["conditional"]["input_ids"].shape[0]
    mode = dict(num_beams=4, **NEW)
    expected = separate(model, inputs, 0.0, 0.7, **mode)
    seen = []
    handle = model.register_forward_pre_hook(
        lambda module, args, kwargs: seen.append(
            (kwargs.get("input_ids") if kwargs.get("input_ids") is not None else kwargs["decoder_input_ids"]).shape[0]),
        with_kwargs=True)
    try:
        got = pmi_generate(model, inputs, alpha=0.0, p=0.7, **mode)
    finally:
        handle.remove()
    assert torch.equal(got, expected)
    assert seen and max(seen) <= rows * 4  # beams of the conditional rows; the paired path would show 2x
    doubled = pmi_generate(model, inputs, alpha=0.0, p=0.7, paired=True, **mode)
    assert torch.equal(doubled, expected)  # asking for the paired path still works, and agrees


def test_paired_processor_refuses_sampling():
    model, inputs = setup("llama")
    pmi = PMIDecode(0.5, 0.9)
    torch.manual_seed(0)
    with pytest.raises(ValueError, match="Paired mode works with greedy search and beam search only"):
        model.generate(**pmi.stack(inputs, model), logits_processor=[pmi], do_sample=True, max_new_tokens=20)


def test_paired_processor_rejects_batches_it_did_not_stack():
    model, inputs = setup("llama")
    with pytest.raises(ValueError, match=r"pmi\.stack\(inputs, model\)"):
        PMIDecode(0.5, 0.9)(torch.zeros((3, 4), dtype=torch.long), torch.zeros((3, 10)))
    pmi = PMIDecode(0.5, 0.9)
    batch = pmi.stack(inputs, model)
    with pytest.raises(ValueError, match="not a multiple of the 6 rows"):
        pmi(batch["input_ids"][:3], torch.zeros((3, 320)))
    with pytest.raises(ValueError, match="conditional\\(\\) takes what generate returned for a stacked batch"):
        pmi.conditional(batch["input_ids"][:3])


def test_blockers_name_the_reason():
    model, inputs = setup("llama")
    assert "guidance_scale" in paired_path_blocker(model, inputs, guidance_scale=1.5)
    assert "stopping_criteria" in paired_path_blocker(model, inputs, stopping_criteria=[lambda ids, scores: False])
    assert paired_path_blocker(model, inputs, num_beams=2, repetition_penalty=1.3) is None


def test_bad_inputs():
    model, inputs = setup("llama")
    with pytest.raises(ValueError, match="'conditional' and 'unconditional'"):
        pmi_generate(model, inputs["conditional"], alpha=0.5)
    short = {"conditional": inputs["conditional"], "unconditional": {k: v[:2] for k, v in inputs["unconditional"].items()}}
    with pytest.raises(ValueError, match="has 3 rows but inputs\\['unconditional'\\] has 2"):
        pmi_generate(model, short, alpha=0.5)
    with pytest.raises(ValueError, match="alpha must be"):
        pmi_generate(model, inputs, alpha=2)


def _count_tokens(model):
    """Tokens the model is run on, over every forward (a pre-hook, so nothing is changed)."""
    seen = []

    def hook(module, args, kwargs):
        ids = kwargs.get("input_ids")
        seen.append(0 if ids is None else ids.numel())

    return seen, model.register_forward_pre_hook(hook, with_kwargs=True)


@pytest.mark.parametrize("kind", ["llama", "gpt2", "bloom"])
@pytest.mark.parametrize("mode", [
    dict(num_beams=4, num_return_sequences=2),
    dict(num_beams=3, do_sample=True),
    dict(do_sample=True, num_return_sequences=3),
])
@pytest.mark.parametrize("paired", [None, False])
def test_prompt_run_once_per_dialogue_gives_the_same_tokens(kind, mode, paired):
    """share_prompt prefills each prompt once instead of once per beam: same output, fewer tokens
    (on the paired and separate paths; the packed path always prefills each prompt once)."""
    tok = tiny_tokenizer(kind)
    model = tiny_model(kind, dtype=torch.float32 if kind == "bloom" else torch.float64)
    inputs = build_inputs(tok, [d for d, _ in DIALOGUES], [h for _, h in DIALOGUES], model=model)
    outputs, work = [], []
    for share in (False, True):
        seen, handle = _count_tokens(model)
        torch.manual_seed(0)
        outputs.append(pmi_generate(model, inputs, alpha=0.5, p=0.9, paired=paired, packed=False, share_prompt=share,
                                    **NEW, **mode))
        handle.remove()
        work.append(sum(seen))
    assert torch.equal(outputs[0], outputs[1])
    prompt = inputs["conditional"]["input_ids"].numel()
    copies = max(mode.get("num_beams", 1), mode.get("num_return_sequences", 1))
    assert work[0] - work[1] >= (copies - 1) * prompt * 0.9


def test_prompt_cache_does_not_apply_to_encoder_decoders_or_single_copies():
    model, inputs = setup("bart")
    assert prompt_cache(model, inputs["conditional"], 4) is None
    model, inputs = setup("llama")
    assert prompt_cache(model, inputs["conditional"], 1) is None
    cache = prompt_cache(model, inputs["conditional"], 4)
    assert cache.get_seq_length() == inputs["conditional"]["input_ids"].shape[1] - 1


def test_processor_reused_with_a_prompt_cache_starts_a_new_generation():
    """Prefix caching: generate's first forward sees a filled cache; the processor must not take
    it for the next step of its previous generation."""
    model, inputs = setup("llama")
    proc = PMIDecode(0.5, 0.9, model=model, unconditional_inputs=inputs["unconditional"])
    opts = dict(num_beams=4, max_new_tokens=8)
    model.generate(**inputs["conditional"], logits_processor=[proc], **opts)
    reused = model.generate(**inputs["conditional"], logits_processor=[proc],
                            **{cache_keyword(model): prompt_cache(model, inputs["conditional"], 4)}, **opts)
    fresh = separate(model, inputs, 0.5, 0.9, **opts)
    assert torch.equal(reused, fresh)


@pytest.mark.parametrize("paired", [None, False])
def test_static_cache_with_beams(paired):
    """generate refuses a prompt cache together with cache_implementation: pmi_generate must not
    hand it one (it once crashed inside generate), and the tokens must be the dynamic cache's."""
    model, inputs = setup("llama")
    opts = dict(num_beams=3, num_return_sequences=2, **NEW)
    got = pmi_generate(model, inputs, alpha=0.5, p=0.9, paired=paired, cache_implementation="static", **opts)
    assert torch.equal(got, pmi_generate(model, inputs, alpha=0.5, p=0.9, paired=paired, **opts))


def test_a_future_warning_naming_a_keyword_we_pass_fails_the_suite():
    """setup.cfg turns transformers' deprecation of a keyword our code passes into an error,
    whichever module warns (transformers attributes them to its own modules)."""
    import warnings

    with pytest.raises(FutureWarning, match="past_key_values"):
        warnings.warn("`past_key_values` is deprecated and will be removed in version 6.0.0 for "
                      "`LlamaForCausalLM.generate`. Use `cache` instead.", FutureWarning)
    model, inputs = setup("llama")
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)  # our own calls raise none on this transformers
        pmi_generate(model, inputs, alpha=0.5, p=0.9, num_beams=2, max_new_tokens=3)
        pmi_generate(model, inputs, alpha=0.5, p=0.9, num_beams=2, max_new_tokens=3, paired=False)
