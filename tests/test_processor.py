"""PMIDecode (separate-cache mode) against plain generate and against the slow reference."""

import copy
import math

import pytest
import torch
from transformers import DynamicCache, LogitsProcessor
from reference import reference_for
from tiny_models import DIALOGUES, PEAKED, tiny_model, tiny_tokenizer

from pmi_decode import PMIDecode, build_inputs, nucleus_mask, pmi_scores
from pmi_decode.model_calls import cache_keyword

MODES = {
    "greedy": dict(),
    "beam": dict(num_beams=4, num_return_sequences=2, length_penalty=0.7, early_stopping=True),
    "beam_sampling": dict(do_sample=True, num_beams=4, num_return_sequences=2),
    "sampling": dict(do_sample=True, num_return_sequences=2, top_k=50, top_p=0.95, temperature=0.8),
}
NEW_TOKENS = 8


def setup(kind, dtype=torch.float64):
    """A peaked tiny model (see tiny_models.PEAKED): the nucleus must decide tokens here, or a
    comparison with the reference would pass with the mask removed."""
    tok, model = tiny_tokenizer(kind), tiny_model(kind, dtype=dtype, logit_scale=PEAKED[kind])
    docs, hists = [d for d, _ in DIALOGUES], [h for _, h in DIALOGUES]
    return model, build_inputs(tok, docs, hists, model=model)


def generate(model, inputs, processors, mode, seed=0, **extra):
    torch.manual_seed(seed)
    extra.setdefault("min_new_tokens", NEW_TOKENS // 2)  # random models like to stop at once
    return model.generate(
        **inputs["conditional"], logits_processor=processors, max_new_tokens=NEW_TOKENS, **MODES[mode], **extra
    )


def reference(model, inputs, alpha, p):
    return reference_for(model, inputs, alpha, p)


@pytest.mark.exactness
@pytest.mark.parametrize("kind", ["bart", "llama", "t5", "gpt2"])
@pytest.mark.parametrize("mode", list(MODES))
def test_alpha0_p1_is_plain_generate(kind, mode):
    model, inputs = setup(kind, dtype=torch.float32)
    plain = generate(model, inputs, [], mode)
    pmi = PMIDecode(0.0, 1.0, model=model, unconditional_inputs=inputs["unconditional"])
    assert torch.equal(generate(model, inputs, [pmi], mode), plain)


@pytest.mark.exactness
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


@pytest.mark.exactness
@pytest.mark.parametrize("kind", ["llama", "bart"])
def test_alpha_zero_with_p_below_one_goes_through_the_nucleus(kind):
    """alpha = 0, p < 1 is not the early return: the scores go through pmi_scores, and sampling
    from the nucleus differs from sampling from the whole distribution."""
    model, inputs = setup(kind)
    fast = generate(model, inputs, [PMIDecode(0.0, 0.5, model=model, unconditional_inputs=inputs["unconditional"])], "sampling")
    slow = generate(model, inputs, [reference(model, inputs, 0.0, 0.5)], "sampling")
    assert torch.equal(fast, slow)
    assert not torch.equal(fast, generate(model, inputs, [], "sampling"))


@pytest.mark.exactness
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
    twin = copy.deepcopy(model)  # builds the prefix cache, as an external cache store would, out of sight
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
        cond = model(**inputs["conditional"], decoder_input_ids=start).logits[:, -1]
        uncond = model(**inputs["unconditional"], decoder_input_ids=start).logits[:, -1]
    out = model.generate(**inputs["conditional"], logits_processor=[proc], max_new_tokens=1,
                         return_dict_in_generate=True, output_scores=True).scores[0]
    expected = torch.log_softmax(cond, -1) - torch.log_softmax(uncond, -1)
    torch.testing.assert_close(out, expected.to(out.dtype), rtol=1e-5, atol=1e-5)


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
            if alpha > 0:  # a token with an infinite PMI is no candidate (unless none is left in its row)
                usable = keep & torch.isfinite(lp_u)
                keep = torch.where(usable.any(-1, keepdim=True), usable, keep)
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


def full_sort_nucleus(lp, p):
    """The nucleus the obvious way: sort every row, keep tokens before the mass reaches p."""
    sorted_probs, order = lp.exp().sort(-1, descending=True)
    cumulative = sorted_probs.cumsum(-1)
    before = torch.cat([torch.zeros_like(cumulative[:, :1]), cumulative[:, :-1]], -1)
    return torch.zeros_like(lp, dtype=torch.bool).scatter(-1, order, before < p) & torch.isfinite(lp)


@pytest.mark.parametrize("staged", [True, False])
@pytest.mark.parametrize("temperature", [0.1, 1.0, 10.0])
@pytest.mark.parametrize("p", [0.05, 0.6, 0.95, 0.9999])
def test_nucleus_matches_a_full_sort(temperature, p, staged, monkeypatch):
    """The top-k search (a CPU's) and the one sort without host waits (an accelerator's, run here
    by taking the CPU off the staged list) must find exactly the set a full sort finds."""
    import pmi_decode.scores

    if not staged:
        monkeypatch.setattr(pmi_decode.scores, "STAGED_ON", ())
    torch.manual_seed(1)
    lp = torch.log_softmax(torch.randn(6, 5000) / temperature, -1)
    assert torch.equal(nucleus_mask(lp, p), full_sort_nucleus(lp, p))
    assert torch.equal(nucleus_mask(lp.view(2, 3, -1), p), full_sort_nucleus(lp, p).view(2, 3, -1))


# ---------------------------------------------------------------------------------------------
# Misuse: every case below once ran without error and returned wrong tokens (or broke the
# instance). Each must now either be exact (equal to a fresh processor / the slow reference)
# or raise a ValueError that names the problem.


def _scoring_processor(model, **forward_kwargs):
    """A user processor that runs the same model between steps, as another processor or a
    scoring call would, and leaves the scores alone."""

    def proc(input_ids, scores):
        with torch.no_grad():
            model(input_ids=input_ids, **forward_kwargs)
        return scores

    return proc


def _separate(model, inputs):
    return PMIDecode(0.5, 0.9, model=model, unconditional_inputs=inputs["unconditional"])


def test_bare_processor_refuses_a_batch_it_did_not_stack():
    """PMIDecode(alpha, p) on an ordinary batch once paired dialogue 2 with dialogue 1."""
    model, inputs = setup("llama")
    for extra in (dict(), dict(num_beams=2)):
        for rows in (slice(0, 2), slice(0, 1)):
            cond = {k: v[rows] for k, v in inputs["conditional"].items()}
            with pytest.raises(ValueError, match=r"pmi\.stack\(inputs, model\)"):
                model.generate(**cond, logits_processor=[PMIDecode(0.5, 0.9)], max_new_tokens=3, **extra)


@pytest.mark.exactness
@pytest.mark.parametrize("kind", ["llama", "bart"])
def test_stack_and_conditional_equal_the_separate_path(kind):
    model, inputs = setup(kind)
    pmi = PMIDecode(0.5, 0.9)
    out = model.generate(**pmi.stack(inputs, model), logits_processor=[pmi], max_new_tokens=NEW_TOKENS, **MODES["beam"])
    expected = generate(model, inputs, [_separate(model, inputs)], "beam", min_new_tokens=0)
    got = pmi.conditional(out)
    if kind == "llama":  # the stacked prompt may be wider than the conditional one: compare what was generated
        got = got[:, pmi.prompt_width:]
        expected = expected[:, inputs["conditional"]["input_ids"].shape[1]:]
    assert torch.equal(got, expected)


@pytest.mark.parametrize("kind", ["llama", "bart"])
def test_stacked_processor_refuses_another_batch(kind):
    model, inputs = setup(kind)
    pmi = PMIDecode(0.5, 0.9)
    pmi.stack(inputs, model)
    other = PMIDecode(0.5, 0.9).stack({k: {kk: vv[:2] for kk, vv in v.items()} for k, v in inputs.items()
                                       if k in ("conditional", "unconditional")}, model)
    with pytest.raises(ValueError, match=r"pmi\.stack\(inputs, model\)"):
        model.generate(**other, logits_processor=[pmi], max_new_tokens=3)


def test_assisted_decoding_is_refused():
    model, inputs = setup("llama")
    one = {"conditional": {k: v[:1] for k, v in inputs["conditional"].items()},
           "unconditional": {k: v[:1] for k, v in inputs["unconditional"].items()}}
    assistant = tiny_model("llama", seed=1)
    with pytest.raises(ValueError, match="(?i)assisted"):
        model.generate(**one["conditional"], logits_processor=[_separate(model, one)], assistant_model=assistant,
                       max_new_tokens=NEW_TOKENS)


def test_prompt_lookup_is_exact_or_refused():
    model, inputs = setup("llama")
    one = {"conditional": {k: v[:1] for k, v in inputs["conditional"].items()},
           "unconditional": {k: v[:1] for k, v in inputs["unconditional"].items()}}
    expected = generate(model, one, [reference(model, one, 0.5, 0.9)], "greedy")
    try:
        got = generate(model, one, [_separate(model, one)], "greedy", prompt_lookup_num_tokens=2)
    except ValueError as err:
        assert "assisted" in str(err).lower()
    else:
        assert torch.equal(got, expected)


def test_encoder_decoder_unconditional_rows_must_match_the_prompts():
    model, inputs = setup("bart")
    cond = {k: torch.cat([v, v[:1]]) for k, v in inputs["conditional"].items()}  # 4 prompts
    two = {k: v[:2] for k, v in inputs["unconditional"].items()}
    proc = PMIDecode(0.5, 0.9, model=model, unconditional_inputs=two)
    with pytest.raises(ValueError, match="unconditional_inputs has 2 rows"):
        model.generate(**cond, logits_processor=[proc], max_new_tokens=3)


def test_decoder_only_unrelated_rows_with_returned_sequences_are_refused():
    model, inputs = setup("llama")
    cond = {k: v[:2] for k, v in inputs["conditional"].items()}  # 2 prompts x 2 returned = 4 rows
    four = {k: torch.cat([v, v[:1]]) for k, v in inputs["unconditional"].items()}  # 4 unrelated rows
    proc = PMIDecode(0.5, 0.9, model=model, unconditional_inputs=four)
    with pytest.raises(ValueError, match="unconditional_inputs"):
        model.generate(**cond, logits_processor=[proc], max_new_tokens=3, do_sample=True, num_return_sequences=2)


@pytest.mark.exactness
@pytest.mark.parametrize("kind", ["llama", "gpt2"])
def test_right_padded_unconditional_inputs_are_repadded(kind):
    model, inputs = setup(kind)
    left = inputs["unconditional"]
    right = {"input_ids": torch.zeros_like(left["input_ids"]), "attention_mask": torch.zeros_like(left["attention_mask"])}
    for row, (ids, mask) in enumerate(zip(left["input_ids"], left["attention_mask"])):
        tokens = ids[mask.bool()]
        right["input_ids"][row, : tokens.numel()] = tokens
        right["attention_mask"][row, : tokens.numel()] = 1
    assert bool((right["attention_mask"][:, -1] == 0).any()), "the batch must contain right padding"
    for mode in ("greedy", "beam"):  # alpha 1: the branch's log-probs decide, so a misread row changes tokens
        proc = PMIDecode(1.0, 0.9, model=model, unconditional_inputs=right)
        got = generate(model, inputs, [proc], mode)
        assert torch.equal(got, generate(model, inputs, [reference(model, inputs, 1.0, 0.9)], mode)), mode


@pytest.mark.parametrize("forward_kwargs", [dict(use_cache=False), dict(use_cache=True)])
def test_other_forwards_between_steps_are_not_a_new_generation(forward_kwargs):
    model, inputs = setup("llama")
    expected = generate(model, inputs, [_separate(model, inputs)], "beam")
    got = generate(model, inputs, [_scoring_processor(model, **forward_kwargs), _separate(model, inputs)], "beam")
    assert torch.equal(got, expected)


@pytest.mark.parametrize("kind", ["bart", "llama"])
def test_other_forwards_between_paired_steps_are_ignored(kind):
    model, inputs = setup(kind)
    runs = []
    for extra in ([], [_scoring_processor(model, use_cache=False)]):
        pmi = PMIDecode(0.5, 0.9)
        out = model.generate(**pmi.stack(inputs, model), logits_processor=[pmi] + extra, num_beams=2, max_new_tokens=5)
        runs.append(pmi.conditional(out))
    assert torch.equal(runs[0], runs[1])


def test_a_cacheless_call_between_generations_does_not_break_the_instance():
    model, inputs = setup("llama")
    proc = _separate(model, inputs)
    first = generate(model, inputs, [proc], "greedy")
    with torch.no_grad():
        model(**inputs["conditional"], use_cache=False)  # e.g. a scoring call
    assert torch.equal(generate(model, inputs, [proc], "greedy"), first)
    proc.reset()
    assert torch.equal(generate(model, inputs, [proc], "greedy"), first)


def test_sequences_that_do_not_continue_the_step_raise():
    """Outside a new generation, a row whose prefix matches no previous row is an error."""
    from transformers import DynamicCache

    model, inputs = setup("llama")
    proc = _separate(model, inputs)
    ids = inputs["conditional"]["input_ids"]
    cache = DynamicCache()
    with torch.no_grad():
        logits = model(**inputs["conditional"], **{cache_keyword(model): cache}).logits[:, -1]
    proc(ids, logits)
    step = torch.cat([ids, torch.tensor([[5], [6], [7]])], dim=1)
    edited = step.clone()
    edited[0, -2] = (edited[0, -2] + 1) % 320  # the previous token of row 0 changed
    with torch.no_grad():
        mask = torch.cat([inputs["conditional"]["attention_mask"], torch.ones(3, 1, dtype=torch.long)], 1)
        logits = model(input_ids=step[:, -1:], attention_mask=mask, **{cache_keyword(model): cache}).logits[:, -1]
    with pytest.raises(ValueError, match="do not continue"):
        proc(edited, logits)


def test_continuing_an_output_with_a_prefix_cache_starts_a_new_generation():
    from pmi_decode.model_calls import prefill

    model, inputs = setup("llama")
    twin = copy.deepcopy(model)  # builds the prefix cache, as an external cache store would, out of sight
    proc = PMIDecode(1.0, 1.0, model=model, unconditional_inputs=inputs["unconditional"])
    out = generate(model, inputs, [proc], "greedy", min_new_tokens=NEW_TOKENS)
    mask = torch.ones_like(out)
    mask[:, : inputs["conditional"]["attention_mask"].shape[1]] = inputs["conditional"]["attention_mask"]
    cont = {"input_ids": out, "attention_mask": mask}
    runs = []
    for processor in (proc, PMIDecode(1.0, 1.0, model=model, unconditional_inputs=inputs["unconditional"])):
        with torch.no_grad():
            cache, _ = prefill(twin, out[:, :-1], mask[:, :-1])
        runs.append(model.generate(**cont, logits_processor=[processor], **{cache_keyword(model): cache}, max_new_tokens=4))
    assert torch.equal(runs[0], runs[1])


def test_training_mode_after_construction_is_refused_at_call_time():
    model, inputs = setup("llama")
    proc = _separate(model, inputs)
    model.train()
    with pytest.raises(ValueError, match="training mode"):
        generate(model, inputs, [proc], "greedy")


def test_paired_mode_refuses_training_mode_at_call_time():
    model, inputs = setup("llama")
    pmi = PMIDecode(0.5, 0.9)
    batch = pmi.stack(inputs, model)
    model.train()
    with pytest.raises(ValueError, match="training mode"):
        model.generate(**batch, logits_processor=[pmi], max_new_tokens=2)


def test_a_peft_wrapped_model_is_watched_through_its_base_model():
    peft = pytest.importorskip("peft")
    model, inputs = setup("llama")
    expected = generate(model, inputs, [_separate(model, inputs)], "beam")
    config = peft.LoraConfig(r=2, target_modules=["q_proj"], init_lora_weights=True)  # B = 0: same outputs
    wrapped = peft.get_peft_model(model, config).eval()
    proc = PMIDecode(0.5, 0.9, model=wrapped, unconditional_inputs=inputs["unconditional"])
    assert torch.equal(generate(wrapped, inputs, [proc], "beam"), expected)


def test_a_token_banned_only_in_the_unconditional_row_never_wins():
    scores = torch.zeros(1, 6)
    lp_u = torch.log_softmax(torch.zeros(1, 6), -1)
    lp_u[0, 3] = -math.inf  # e.g. no_repeat_ngram_size banned it in the document-free row only
    out = pmi_scores(scores, lp_u, 0.5, 1.0)
    assert out[0].argmax().item() != 3
    assert torch.isfinite(out[0, [0, 1, 2, 4, 5]]).all() and out.max() < 1e3


def test_paired_per_row_processors_never_let_a_banned_token_win():
    from transformers import LogitsProcessorList, NoRepeatNGramLogitsProcessor

    model, inputs = setup("llama")
    pmi = PMIDecode(1.0, 1.0, conditional_processors=LogitsProcessorList([NoRepeatNGramLogitsProcessor(1)]))
    out = model.generate(**pmi.stack(inputs, model), logits_processor=[pmi], max_new_tokens=6, num_beams=2,
                         return_dict_in_generate=True, output_scores=True)
    assert max(s[torch.isfinite(s)].abs().max().item() for s in out.scores) < 1e3
    for row in pmi.conditional(out.sequences)[:, inputs["conditional"]["input_ids"].shape[1]:]:
        assert len(set(row.tolist())) == len(row)  # no token twice


class _Records(LogitsProcessor):
    changes_no_scores = True  # declared: paired mode may run after it

    def __call__(self, input_ids, scores):
        return scores


@pytest.mark.parametrize("kind", ["llama", "bart"])
def test_generate_processors_before_the_paired_processor_are_refused(kind):
    """generate's own processors run on both halves in bare paired mode: the document-free half is
    no longer the model's distribution, and the tokens differ from the reference, so refused. A
    stock BART checkpoint's generation config sets forced_eos_token_id and no_repeat_ngram_size."""
    model, inputs = setup(kind)
    for options, name in ((dict(repetition_penalty=1.2), "RepetitionPenaltyLogitsProcessor"),
                          (dict(no_repeat_ngram_size=3), "NoRepeatNGramLogitsProcessor"),
                          (dict(min_new_tokens=2), "MinNewTokensLengthLogitsProcessor"),
                          (dict(forced_eos_token_id=2), "ForcedEOSTokenLogitsProcessor")):
        pmi = PMIDecode(0.5, 0.9)
        with pytest.raises(ValueError, match=f"generate applies .*{name}.* to both halves"):
            model.generate(**pmi.stack(inputs, model), logits_processor=[pmi], num_beams=2, max_new_tokens=4,
                           **options)
    pmi = PMIDecode(0.5, 0.9)
    first = pmi.conditional(model.generate(**pmi.stack(inputs, model), logits_processor=[pmi], num_beams=2,
                                           max_new_tokens=4))
    pmi = PMIDecode(0.5, 0.9)  # a processor that declares it changes no score may come first
    assert torch.equal(pmi.conditional(model.generate(**pmi.stack(inputs, model), logits_processor=[_Records(), pmi],
                                                      num_beams=2, max_new_tokens=4)), first)


def test_nan_unconditional_log_probs_never_give_nan():
    scores = torch.randn(3, 10)
    lp_u = torch.log_softmax(torch.randn(3, 10), -1)
    lp_u[0] = math.nan
    lp_u[1, 2] = math.nan
    for alpha, p in ((0.5, 0.9), (1.0, 1.0)):
        out = pmi_scores(scores, lp_u, alpha, p)
        assert not torch.isnan(out).any()
        assert torch.isfinite(out).any(dim=-1).all()


def test_nan_from_the_document_free_branch_is_reported():
    """Fault injection on the model: its logits are NaN while the branch runs (between the two
    user processors around PMIDecode); the processor must say so, never return NaN."""
    model, inputs = setup("llama")
    state = {"on": False}

    def flag(value):
        def proc(input_ids, scores):
            state["on"] = value
            return scores
        return proc

    handle = model.lm_head.register_forward_hook(lambda m, a, out: out * math.nan if state["on"] else out)
    try:
        with pytest.raises(ValueError, match="NaN"):
            generate(model, inputs, [flag(True), _separate(model, inputs), flag(False)], "greedy")
    finally:
        handle.remove()


def test_branch_cache_is_freed_without_garbage_collection():
    import gc
    import weakref

    model, inputs = setup("llama")
    proc = _separate(model, inputs)
    generate(model, inputs, [proc], "greedy")
    branch = weakref.ref(proc._branch)
    gc.collect()
    gc.disable()
    try:
        del proc
        assert branch() is None
    finally:
        gc.enable()


def test_nucleus_stages_each_find_a_full_sorts_set():
    """Rows settled by each stage of the search in one batch: nucleus within the top 64, within
    the top 1024, and beyond (full sort); with -inf entries and a tie at the stage boundary."""
    torch.manual_seed(3)
    vocab = 6000
    logits = torch.randn(9, vocab)
    logits[0:3] *= 30.0   # peaked: a few tokens
    logits[3:6] *= 3.0    # a nucleus of some hundreds of tokens
    logits[6, :10] = -math.inf
    logits[7, :2000] = 0.0  # flat over 2000 equal tokens: the top-1024 boundary falls in a tie
    logits[7, 2000:] = -30.0
    lp = torch.log_softmax(logits, -1)
    expected = full_sort_nucleus(lp, 0.9)
    got = nucleus_mask(lp, 0.9)
    sizes = got.sum(-1)
    assert (sizes[0:3] <= 64).all() and ((sizes[3:6] > 64) & (sizes[3:6] <= 1024)).all()
    assert (sizes[6:] > 1024).all()
    # ties: the same number of tokens, all of them among the tied ones
    assert torch.equal(got[:7], expected[:7]) and torch.equal(got[8:], expected[8:])
    assert sizes[7] == expected[7].sum() and not got[7, 2000:].any()


def test_nucleus_sorts_only_the_rows_that_need_it_and_finds_the_same_set():
    """Peaked and flat rows in one batch: the flat rows' nucleus lies beyond the top 64, the
    peaked rows' within it; the mask must equal a full sort of every row (and keep -inf out)."""
    torch.manual_seed(2)
    logits = torch.randn(8, 3000)
    logits[::2] *= 20.0  # peaked rows
    logits[1, :5] = -math.inf
    lp = torch.log_softmax(logits, -1)
    expected = full_sort_nucleus(lp, 0.9)
    got = nucleus_mask(lp, 0.9)
    assert torch.equal(got, expected)
    assert (got[1::2].sum(-1) > 64).all() and (got[::2].sum(-1) <= 64).all()


@pytest.mark.parametrize("kind,message", [("llama", "generate's prompts are not the stacked batch"),
                                          ("bart", "generate's encoder inputs are not the stacked batch")])
def test_stacked_processor_refuses_a_batch_of_the_same_size(kind, message):
    """Same rows and width as the stacked batch, other content (the dialogues in another order):
    only the content check can refuse it."""
    model, inputs = setup(kind)
    pmi = PMIDecode(0.5, 0.9)
    batch = pmi.stack(inputs, model)
    order = torch.tensor([1, 2, 0, 4, 5, 3])
    shuffled = {key: value[order] for key, value in batch.items()}
    with pytest.raises(ValueError, match=message):
        model.generate(**shuffled, logits_processor=[pmi], max_new_tokens=3)


def test_a_beam_that_continues_no_previous_beam_raises():
    """With beams (two copies of each prompt), a row whose generated prefix matches neither row of
    its group at the previous step is an error, even when the prompt and other rows match."""
    model, inputs = setup("llama")
    cond = {key: value.repeat_interleave(2, dim=0) for key, value in inputs["conditional"].items()}
    proc = _separate(model, inputs)
    ids, mask = cond["input_ids"], cond["attention_mask"]
    cache, keyword = DynamicCache(), cache_keyword(model)
    steps = [ids]
    for tokens in ([5, 6, 7, 8, 9, 10], [11, 12, 13, 14, 15, 16]):
        steps.append(torch.cat([steps[-1], torch.tensor(tokens).unsqueeze(1)], dim=1))
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask, **{keyword: cache}).logits[:, -1]
        proc(ids, logits)
        mask = torch.cat([mask, torch.ones(6, 1, dtype=torch.long)], 1)
        logits = model(input_ids=steps[1][:, -1:], attention_mask=mask, **{keyword: cache}).logits[:, -1]
        proc(steps[1], logits)
        mask = torch.cat([mask, torch.ones(6, 1, dtype=torch.long)], 1)
        logits = model(input_ids=steps[2][:, -1:], attention_mask=mask, **{keyword: cache}).logits[:, -1]
    edited = steps[2].clone()
    edited[0, -2] = 7  # row 0 now continues "7", which neither row of its group (5, 6) wrote
    with pytest.raises(ValueError, match="do not continue"):
        proc(edited, logits)
