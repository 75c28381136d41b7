"""Word-level PMI aggregations on hand-made cases: one wrong number or name must lower them."""

import math

import pytest
from tiny_models import DIALOGUES, tiny_model, tiny_tokenizer

from pmi_decode.metrics import PMIFaith
from pmi_decode.metrics.token_aggregation import AGGREGATION_KEYS, aggregate, align_tokens, load_nlp

NLP = load_nlp()
HISTORY = ["Do you know the album Kind of Blue?"]
# GPT-2 style tokens (a leading space belongs to the token), EOS last.
TOKENS = ["Yes", ",", " Miles", " Davis", " recorded", " it", " in", " 19", "59", " for", " Columbia", ".", "<|im_end|>"]
RESPONSE = "Yes, Miles Davis recorded it in 1959 for Columbia."


def scores(token_cpmi, response=RESPONSE, tokens=TOKENS, token_upmi=None, **kw):
    return aggregate(tokens, token_cpmi, token_upmi if token_upmi is not None else token_cpmi, response,
                     HISTORY, nlp=NLP, **kw)


def test_alignment_by_character_offsets():
    spans = align_tokens(TOKENS, RESPONSE)
    assert [RESPONSE[a:b] for a, b in spans[:-1]] == [t.strip() for t in TOKENS[:-1]]
    assert spans[-1] is None  # EOS is not in the text
    # SentencePiece pieces and a token that is not in the text
    assert align_tokens(["\u2581Hello", "\u2581world", "<eos>"], "Hello world") == [(0, 5), (6, 11), None]
    assert align_tokens(["\u2581Hi", "\ufffd", "\u2581there"], "Hi \u00e9 there")[1] is None


def test_one_wrong_number_lowers_the_word_level_scores_more_than_the_mean():
    faithful = [1.0] * len(TOKENS)
    wrong = list(faithful)
    wrong[7], wrong[8] = -3.0, -2.0  # the year's two tokens: the document says otherwise
    good, bad = scores(faithful), scores(wrong)
    mean_drop = sum(faithful) / len(faithful) - sum(wrong) / len(wrong)
    # The year is one word whose CPMI is the sum of its tokens: -5.
    assert bad["cpmi_content_min"] == pytest.approx(-5.0)
    assert good["cpmi_low3"] - bad["cpmi_low3"] > 2 * mean_drop
    assert good["cpmi_content_min"] - bad["cpmi_content_min"] > 2 * mean_drop
    assert bad["cpmi_supported_share"] < good["cpmi_supported_share"] == 1.0
    for key in AGGREGATION_KEYS:
        assert bad[key] < good[key] or key == "cpmi_supported_share", key


def test_one_wrong_name_lowers_the_scores():
    response = "Yes, John Coltrane recorded it in 1959 for Columbia."
    tokens = ["Yes", ",", " John", " Col", "trane", " recorded", " it", " in", " 19", "59", " for", " Columbia", "."]
    good = scores([0.5] * len(tokens), response, tokens)
    wrong = [0.5] * len(tokens)
    wrong[3] = wrong[4] = -1.5
    bad = scores(wrong, response, tokens)
    assert bad["cpmi_content_min"] == pytest.approx(-3.0)
    assert bad["cpmi_supported_share"] == pytest.approx(good["cpmi_supported_share"] - 1 / 5)  # 5 content words
    assert bad["cpmi_low3"] < good["cpmi_low3"]


def test_function_words_do_not_count_as_content():
    values = [1.0] * len(TOKENS)
    values[6] = -10.0  # " in": a function word
    result = scores(values)
    assert result["cpmi_content_min"] > 0 and result["cpmi_supported_share"] == 1.0
    assert result["cpmi_content_mean"] == pytest.approx(1.0)


def test_words_from_the_history_are_left_out_of_the_novel_mean():
    response = "Kind of Blue is by Miles Davis."
    tokens = [" Kind", " of", " Blue", " is", " by", " Miles", " Davis", "."]
    values = [5.0, 5.0, 5.0, 0.0, 0.0, 1.0, 1.0, 0.0]  # the repeated title is easy given the history
    result = aggregate(tokens, values, None, response, HISTORY, nlp=NLP)
    assert result["cpmi_novel_mean"] == pytest.approx(0.5)  # is, by, Miles, Davis
    assert "pmi_min_mean" not in result and "upmi_low3" not in result


def test_min_of_cpmi_and_upmi():
    cpmi = [1.0] * len(TOKENS)
    upmi = [1.0] * len(TOKENS)
    upmi[10] = -4.0  # " Columbia" only supported given the history
    result = scores(cpmi, token_upmi=upmi)
    assert result["pmi_min_mean"] == pytest.approx((9 - 4) / 10)  # punctuation and EOS are on no word
    assert result["upmi_low3"] < result["cpmi_low3"]


def test_margin_and_k():
    values = [1.0] * len(TOKENS)
    values[4] = -0.2  # " recorded"
    assert scores(values, margin=-0.5)["cpmi_supported_share"] == 1.0
    assert scores(values, margin=0.0)["cpmi_supported_share"] == pytest.approx(4 / 5)
    assert "cpmi_low1" in scores(values, k=1)
    with pytest.raises(ValueError, match="k must be"):
        scores(values, k=0)


def test_mismatched_lengths_are_a_clear_error():
    with pytest.raises(ValueError, match="13 tokens but 3 CPMI"):
        aggregate(TOKENS, [0.0] * 3, None, RESPONSE, nlp=NLP)


def test_response_without_words_falls_back_to_tokens():
    result = aggregate(["?", "!"], [1.0, -1.0], None, "?!", [], nlp=NLP)
    assert result["cpmi_content_min"] == -1.0 and result["cpmi_low3"] == 0.0


def test_pmifaith_returns_the_aggregations_of_its_own_tokens():
    model, tokenizer = tiny_model("llama"), tiny_tokenizer("llama")
    docs, hists = [d for d, _ in DIALOGUES], [h for _, h in DIALOGUES]
    responses = ["Paris has the Eiffel Tower, built in 1889.", "Yes, Kind of Blue.", "The Beatles, from Liverpool!"]
    scorer = PMIFaith(model, tokenizer, aggregations=True)
    results = scorer.score(docs, hists, responses, return_tokens=True)
    for result, response, history in zip(results, responses, hists):
        expected = aggregate(result["tokens"], result["token_cpmi"], result["token_upmi"], response, history, nlp=NLP)
        for key in AGGREGATION_KEYS:
            assert math.isfinite(result[key])
            assert result[key] == pytest.approx(expected[key])
    plain = PMIFaith(model, tokenizer).score(docs, hists, responses)
    assert "cpmi_low3" not in plain[0]
    with pytest.raises(ValueError, match="needs 'cpmi'"):
        PMIFaith(model, tokenizer, aggregations=True, compute=["upmi"])


def test_empty_history_is_refused_unless_allowed():
    model, tokenizer = tiny_model("llama"), tiny_tokenizer("llama")
    doc = DIALOGUES[0][0]
    with pytest.raises(ValueError, match="history"):
        PMIFaith(model, tokenizer).score([doc], [[]], ["Hello there."])
    (result,) = PMIFaith(model, tokenizer, allow_empty_history=True).score([doc], [[]], ["Hello there."])
    assert result["cpmi_sum"] == pytest.approx(result["upmi_sum"])
