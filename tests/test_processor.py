"""PMIDecode (separate-cache mode) against plain generate and against the slow reference."""

import math

import pytest
import torch
from reference import ReferencePMIDecode, unpadded
from tiny_models import DIALOGUES, tiny_model, tiny_tokenizer

from pmi_decode import PMIDecode, build_inputs, nucleus_mask, pmi_scores

MODES = {
    "greedy": dict(),
    "beam": dict(num_beams=4, num_return_sequences=2, length_penalty=0.7, early_stopping=True),
    "beam_sampling": dict(do_sample=True, num_beams=4, num_return_sequences=2),
    "sampling": dict(do_sample=True, num_return_sequences=2, top_k=50, top_p=0.95, temperature=0.8),
}
NEW_TOKENS = 8


def setup(kind, dtype=torch.float64):
    tok, model = tiny_tokenizer(kind), tiny_model(kind, dtype=dtype)
    docs, hists = [d for d, _ in DIALOGUES], [h for _, h in DIALOGUES]
    return model, build_inputs(tok, docs, hists, model=model)


def generate(model, inputs, processors, mode, seed=0, **extra):
    torch.manual_seed(seed)
    extra.setdefault("min_new_tokens", NEW_TOKENS // 2)  # random models like to stop at once
    return model.generate(
        **inputs["conditional"], logits_processor=processors, max_new_tokens=NEW_TOKENS, **MODES[mode], **extra
    )


def reference(model, inputs, alpha, p):
    return ReferencePMIDecode(
        alpha,
        p,
        model=model,
        unconditional_ids=unpadded(inputs["unconditional"]),
        conditional_prompt_length=inputs["conditional"]["input_ids"].shape[1],
    )


@pytest.mark.parametrize("kind", ["bart", "llama", "t5", "gpt2"])
@pytest.mark.parametrize("mode", list(MODES))
def test_alpha0_p1_is_plain_generate(kind, mode):
    model, inputs = setup(kind, dtype=torch.float32)
    plain = generate(model, inputs, [], mode)
    pmi = PMIDecode(0.0, 1.0, model=model, unconditional_inputs=inputs["unconditional"])
    assert torch.equal(generate(model, inputs, [pmi], mode), plain)


@pytest.mark.parametrize("kind", ["bart", "llama"])
@pytest.mark.parametrize("mode", ["greedy", "beam", "beam_sampling", "sampling"])
def test_equals_slow_reference(kind, mode):
    model, inputs = setup(kind)
    alpha, p = 0.5, 0.9
    fast = generate(model, inputs, [PMIDecode(alpha, p, model=model, unconditional_inputs=inputs["unconditional"])], mode)
    slow = generate(model, inputs, [reference(model, inputs, alpha, p)], mode)
    assert torch.equal(fast, slow)
    # the objective must actually change something, or the comparison proves nothing
    assert not torch.equal(fast, generate(model, inputs, [], mode))


@pytest.mark.parametrize("kind", ["gpt2", "t5", "bloom"])
def test_equals_slow_reference_other_families(kind):
    # transformers' BLOOM yields NaN for left-padded rows in float64, so it runs in float32
    model, inputs = setup(kind, dtype=torch.float32 if kind == "bloom" else torch.float64)
    fast = generate(model, inputs, [PMIDecode(1.0, 0.8, model=model, unconditional_inputs=inputs["unconditional"])], "beam")
    slow = generate(model, inputs, [reference(model, inputs, 1.0, 0.8)], "beam")
    assert torch.equal(fast, slow)


def test_left_padding_positions_matter():
    """With left padding the branch must pass position ids: feeding none changes GPT-2's tokens."""
    model, inputs = setup("gpt2")
    assert bool((inputs["unconditional"]["attention_mask"] == 0).any()), "the batch must contain padding"
    fast = generate(model, inputs, [PMIDecode(1.0, 1.0, model=model, unconditional_inputs=inputs["unconditional"])], "greedy")
    slow = generate(model, inputs, [reference(model, inputs, 1.0, 1.0)], "greedy")
    assert torch.equal(fast, slow)


def test_one_instance_serves_several_generations():
    model, inputs = setup("llama")
    proc = PMIDecode(0.5, 0.9, model=model, unconditional_inputs=inputs["unconditional"])
    first = generate(model, inputs, [proc], "beam")
    again = generate(model, inputs, [proc], "greedy")
    fresh = PMIDecode(0.5, 0.9, model=model, unconditional_inputs=inputs["unconditional"])
    assert torch.equal(again, generate(model, inputs, [fresh], "greedy"))
    assert torch.equal(first, generate(model, inputs, [proc], "beam"))


def test_continuing_a_finished_sequence_starts_a_new_generation():
    """A prompt that extends the last output by one token must not reuse the stale cache."""
    model, inputs = setup("llama")
    proc = PMIDecode(1.0, 1.0, model=model, unconditional_inputs=inputs["unconditional"])
    out = generate(model, inputs, [proc], "greedy", min_new_tokens=NEW_TOKENS)
    cont = {"input_ids": out[:, :-1], "attention_mask": torch.ones_like(out[:, :-1])}
    cont["attention_mask"][:, : inputs["conditional"]["attention_mask"].shape[1]] = inputs["conditional"]["attention_mask"]
    cont_inputs = {"conditional": cont, "unconditional": inputs["unconditional"]}
    reused = generate(model, cont_inputs, [proc], "greedy")
    fresh = generate(model, cont_inputs, [PMIDecode(1.0, 1.0, model=model, unconditional_inputs=inputs["unconditional"])], "greedy")
    assert torch.equal(reused, fresh)


def test_chosen_tokens_stay_in_the_conditional_nucleus():
    model, inputs = setup("llama")
    p = 0.3
    proc = PMIDecode(1.0, p, model=model, unconditional_inputs=inputs["unconditional"])
    out = model.generate(
        **inputs["conditional"], logits_processor=[proc], max_new_tokens=NEW_TOKENS,
        return_dict_in_generate=True, output_logits=True,
    )
    start = inputs["conditional"]["input_ids"].shape[1]
    for step, logits in enumerate(out.logits):
        probs = torch.softmax(logits.double(), dim=-1)
        for row in range(probs.shape[0]):
            chosen = out.sequences[row, start + step].item()
            order = probs[row].argsort(descending=True).tolist()
            mass_before = probs[row, order[: order.index(chosen)]].sum().item()
            assert mass_before < p + 1e-6


def test_alpha1_p1_is_pure_pmi():
    model, inputs = setup("bart")
    proc = PMIDecode(1.0, 1.0, model=model, unconditional_inputs=inputs["unconditional"])
    start = torch.full((3, 1), model.generation_config.decoder_start_token_id)
    with torch.no_grad():
        cond = model(**inputs["conditional"], decoder_input_ids=start).logits[:, -1].float()
        uncond = model(**inputs["unconditional"], decoder_input_ids=start).logits[:, -1].float()
    proc._on_model_forward({"past_key_values": None})
    out = proc(start, cond)
    expected = torch.log_softmax(cond, -1) - torch.log_softmax(uncond, -1)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)


def test_scores_finite_inside_nucleus_and_never_nan():
    torch.manual_seed(0)
    scores = torch.randn(4, 50)
    scores[0, :10] = -math.inf  # e.g. banned by an earlier processor
    lp_u = torch.log_softmax(torch.randn(4, 50), -1)
    lp_u[0, :20] = -math.inf
    lp_u[1, 5] = -math.inf
    for alpha in (0.0, 0.25, 1.0):
        for p in (0.2, 0.9, 1.0):
            out = pmi_scores(scores, lp_u, alpha, p)
            keep = nucleus_mask(torch.log_softmax(scores, -1), p)
            assert not torch.isnan(out).any()
            assert torch.isfinite(out[keep]).all()
            assert torch.isneginf(out[~keep]).all()
            assert torch.isneginf(out[0, :10]).all()


def test_nucleus_is_the_smallest_set_reaching_p():
    probs = torch.tensor([[0.5, 0.3, 0.15, 0.05]])
    lp = probs.log()
    assert nucleus_mask(lp, 0.5).tolist() == [[True, False, False, False]]
    assert nucleus_mask(lp, 0.51).tolist() == [[True, True, False, False]]
    assert nucleus_mask(lp, 0.79).tolist() == [[True, True, False, False]]
    assert nucleus_mask(lp, 0.81).tolist() == [[True, True, True, False]]
    assert nucleus_mask(lp, 1e-9).tolist() == [[True, False, False, False]]
    assert nucleus_mask(lp, 1.0).tolist() == [[True, True, True, True]]


@pytest.mark.parametrize("alpha", [-0.1, 1.5, float("nan"), "0.5", None, True])
def test_bad_alpha(alpha):
    with pytest.raises(ValueError, match=r"alpha must be a number in \[0, 1\]"):
        PMIDecode(alpha, 0.9)


@pytest.mark.parametrize("p", [0.0, -1, 1.2, float("nan"), "1"])
def test_bad_p(p):
    with pytest.raises(ValueError, match=r"p must be a number in \(0, 1\]"):
        PMIDecode(0.5, p)


def test_missing_model_or_inputs():
    model, inputs = setup("llama")
    with pytest.raises(ValueError, match="model is required with unconditional_inputs"):
        PMIDecode(0.5, 0.9, unconditional_inputs=inputs["unconditional"])
    with pytest.raises(ValueError, match="unconditional_inputs is required with model"):
        PMIDecode(0.5, 0.9, model=model)
    with pytest.raises(ValueError, match="must be a dict with 'input_ids' and 'attention_mask'"):
        PMIDecode(0.5, 0.9, model=model, unconditional_inputs={"input_ids": inputs["unconditional"]["input_ids"]})


def test_unconditional_on_another_device():
    model, inputs = setup("llama")
    moved = {k: v.to("meta") for k, v in inputs["unconditional"].items()}
    with pytest.raises(ValueError, match="unconditional_inputs are on meta, but the model is on cpu"):
        PMIDecode(0.5, 0.9, model=model, unconditional_inputs=moved)


@pytest.mark.parametrize("kind", ["llama", "bart"])
def test_unconditional_batch_size_mismatch(kind):
    model, inputs = setup(kind)
    two_rows = {k: v[:2] for k, v in inputs["unconditional"].items()}
    proc = PMIDecode(0.5, 0.9, model=model, unconditional_inputs=two_rows)
    with pytest.raises(ValueError, match="unconditional_inputs has 2 rows"):
        generate(model, inputs, [proc], "greedy")


def test_grouping_mismatch_is_caught():
    """4 beams x 3 prompts = 12 rows also divide by 4 unconditional rows; the prompts tell them apart."""
    model, inputs = setup("llama")
    four = {k: torch.cat([v, v[:1]]) for k, v in inputs["unconditional"].items()}
    proc = PMIDecode(0.5, 0.9, model=model, unconditional_inputs=four)
    with pytest.raises(ValueError, match="unconditional_inputs has 4 rows"):
        generate(model, inputs, [proc], "beam")


def test_use_cache_false_is_refused():
    model, inputs = setup("llama")
    proc = PMIDecode(0.5, 0.9, model=model, unconditional_inputs=inputs["unconditional"])
    with pytest.raises(ValueError, match="use_cache=False"):
        generate(model, inputs, [proc], "greedy", use_cache=False)


def test_training_mode_is_refused():
    model, inputs = setup("llama")
    model.train()
    with pytest.raises(ValueError, match="training mode"):
        PMIDecode(0.5, 0.9, model=model, unconditional_inputs=inputs["unconditional"])


@pytest.mark.parametrize("temperature", [0.1, 1.0, 10.0])
@pytest.mark.parametrize("p", [0.05, 0.6, 0.95, 0.9999])
def test_nucleus_matches_a_full_sort(temperature, p):
    """The top-k search must find exactly the set a full sort finds, peaked or flat."""
    torch.manual_seed(1)
    lp = torch.log_softmax(torch.randn(6, 5000) / temperature, -1)
    probs = lp.exp()
    sorted_probs, order = probs.sort(-1, descending=True)
    cumulative = sorted_probs.cumsum(-1)
    before = torch.cat([torch.zeros_like(cumulative[:, :1]), cumulative[:, :-1]], -1)
    expected = torch.zeros_like(probs, dtype=torch.bool).scatter(-1, order, before < p)
    assert torch.equal(nucleus_mask(lp, p), expected)
