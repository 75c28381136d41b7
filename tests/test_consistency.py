"""ConsisTest's hybrid scorer: every rule case by case, the NLI paths, and the NLI wrapper."""

from __future__ import annotations

import pytest
import torch
from transformers import RobertaConfig, RobertaForSequenceClassification, pipeline

from pmi_decode.metrics.consistency import ConsistencyScorer, summarize
from pmi_decode.metrics.consistency_rules import (
    expected_polarity,
    keyword_recall,
    normalize,
    short_answers,
    strip_counter_question,
    words_to_numbers,
    yes_no_word,
)
from pmi_decode.metrics.nli import NLI, NLIUnavailable
from pmi_decode.batch.scoring import get_metric


class TableNLI:
    """A deterministic NLI: a label per (premise, hypothesis), "neutral" otherwise; records its calls."""

    def __init__(self, table=None, default="neutral"):
        self.table, self.default, self.calls = dict(table or {}), default, []

    def __call__(self, premises, hypotheses):
        pairs = list(zip(premises, hypotheses))
        self.calls.append(pairs)
        return [self.table.get(pair, self.default) for pair in pairs]


def one(scorer, question, response, answer, kind, fact="FACT"):
    return scorer.score([question], [response], [answer], [kind], [fact])[0]


RULES_ONLY = ConsistencyScorer(nli=None)

# (question, response, reference answer, expected decision, expected score) for yes/no questions, no NLI needed
YES_NO_CASES = [
    ("do you have a cat ?", "No, I don't.", "no", "short_answer_agrees", 1.0),
    ("do you have a cat ?", "nope. i do not.", "no", "short_answer_agrees", 1.0),
    ("do you have a cat ?", "I don't, I have a bird", "no", "short_answer_agrees", 1.0),
    ("do you have a cat ?", "i do n't", "no", "short_answer_agrees", 1.0),               # split contraction
    ("do you have a cat ?", "i dont", "no", "short_answer_agrees", 1.0),                  # no apostrophe
    ("do you have a cat ?", "I do!", "no", "short_answer_disagrees", 0.0),
    ("do you have a cat ?", "Yes! I love her.", "no", "yes_no_word_disagrees", 0.0),
    ("do you have a cat ?", "Of course not.", "yes", "yes_no_word_disagrees", 0.0),
    ("do you have a cat ?", "Well, yeah, I do.", "yes", "short_answer_agrees", 1.0),      # filler skipped
    ("do you have a cat ?", "Yes, I don't.", "yes", "short_and_long_parts_disagree", 0.0),
    ("are you rich ?", "I'm not, I spend it all on hats", "no", "short_answer_agrees", 1.0),
    ("are you rich ?", "i am not", "no", "short_answer_agrees", 1.0),
    ("are you rich ?", "I am.", "no", "short_answer_disagrees", 0.0),
    ("are you rich ?", "I'm.", "yes", "short_answer_agrees", 1.0),
    ("can you drive ?", "I can't.", "no", "short_answer_agrees", 1.0),
    ("can you drive ?", "i cannot", "no", "short_answer_agrees", 1.0),
    ("have you been to spain ?", "I've.", "yes", "short_answer_agrees", 1.0),
    ("have you been to spain ?", "i haven't", "yes", "short_answer_disagrees", 0.0),
    ("will you move soon ?", "I won't", "no", "short_answer_agrees", 1.0),
    ("were you rich growing up ?", "I was not.", "no", "short_answer_agrees", 1.0),
    ("is your mom traditional ?", "She is, very much so.", "yes", "short_answer_agrees", 1.0),
    ("is your mom traditional ?", "Yeah, she isn't", "yes", "short_and_long_parts_disagree", 0.0),
    ("does your dog bark ?", "he doesn't", "no", "short_answer_agrees", 1.0),
    ("do your parents live nearby ?", "they do, and they visit often", "yes", "short_answer_agrees", 1.0),
    ("are there goats on your farm ?", "there are!", "yes", "short_answer_agrees", 1.0),
    ("so, do you like pizza ?", "i do too", "i do | yes", "short_answer_agrees", 1.0),  # leading "so", connective
]


@pytest.mark.parametrize("question,response,answer,decision,score", YES_NO_CASES)
def test_yes_no_rules_decide_without_nli(question, response, answer, decision, score):
    nli = TableNLI(default="contradiction")  # would flip any NLI-judged item: rules must not consult it
    res = one(ConsistencyScorer(nli=nli), question, response, answer, "yn")
    assert (res["decision"], res["score"]) == (decision, score), res["explanation"]
    assert nli.calls == [] and res["nli_label"] is None
    assert res["explanation"]


def test_short_answer_needs_to_stand_alone():
    # "i do like it" is a long answer (left to NLI), not the short answer "i do"; "i do not" is negative.
    nli = TableNLI({("FACT", "I do like it a lot"): "entailment"})
    res = one(ConsistencyScorer(nli=nli), "do you like pizza ?", "I do like it a lot", "yes", "yn")
    assert res["decision"] == "nli_entailment" and res["score"] == 1.0 and res["short_answer"] is None
    assert len(nli.calls) == 1


@pytest.mark.parametrize("label,decision,score", [
    ("entailment", "yes_no_word_agrees", 1.0),
    ("neutral", "yes_no_word_agrees", 1.0),           # a neutralised judgement does not cost the right "yes"
    ("contradiction", "yes_no_word_agrees_nli_contradiction", 0.0),
])
def test_yes_word_then_nli_guard(label, decision, score):
    response = "Yes, I have four of them."
    nli = TableNLI({("i keep three goats", response): label})
    res = one(ConsistencyScorer(nli=nli), "do you have any goats ?", response, "yes", "yn", "i keep three goats")
    assert (res["decision"], res["score"], res["nli_label"]) == (decision, score, label)
    assert res["yes_no_word"] == "yes" and res["nli_checked"]


@pytest.mark.parametrize("label,decision,score", [
    ("entailment", "nli_entailment", 1.0), ("neutral", "nli_no_entailment", 0.0),
    ("contradiction", "nli_no_entailment", 0.0),
])
def test_yes_no_without_rule_is_nli(label, decision, score):
    response = "I only drink tea."
    nli = TableNLI({("i don't drink coffee", response): label})
    res = one(ConsistencyScorer(nli=nli), "do you drink coffee ?", response, "no", "yn", "i don't drink coffee")
    assert (res["decision"], res["score"]) == (decision, score)


def test_elliptical_question_has_no_short_form_but_yes_word_counts():
    assert short_answers("ever been to spain ?") is None
    res = one(RULES_ONLY, "ever been to spain ?", "yes, loved it", "i've | i have | yes", "yn")
    assert res["decision"] == "yes_no_word_agrees" and res["score"] == 1.0 and not res["nli_checked"]


# ------------------------------------------------------------------------------------------- WH


@pytest.mark.parametrize("response,answer,recall,found", [
    ("I have 2 goats. Do you have pets?", "three", 0.0, []),
    ("I have three goats.", "three", 1.0, ["3"]),
    ("I keep 3 of them", "three", 1.0, ["3"]),                               # number words normalised
    ("twenty-five", "25", 1.0, ["25"]),
    ("I like tea", "fancy tea", 0.5, ["tea"]),                                 # partial keyword coverage
    ("a violin", "violin | the violin", 1.0, ["violin"]),                     # articles ignored, alternatives
    ("the city of denver", "small farm outside of denver | denver", 1.0, ["denver"]),
])
def test_wh_keyword_recall(response, answer, recall, found):
    nli = TableNLI(default="neutral")
    res = one(ConsistencyScorer(nli=nli), "How many goats do you keep?", response, answer, "wh")
    assert res["decision"] == "keyword_recall" and res["score"] == pytest.approx(recall)
    assert res["keywords"]["found"] == found and res["nli_label"] == "neutral"


def test_wh_counter_question_is_dropped_before_matching():
    # "green" appears only in the question back to the user, which is not part of the answer.
    res = one(RULES_ONLY, "What is your favorite color?", "I love blue. Do you like green?", "green", "wh")
    assert res["clean_response"] == "I love blue." and res["score"] == 0.0


def test_wh_contradiction_scores_zero_despite_keywords():
    response = "My favorite color is not green, it is red."
    nli = TableNLI({("my favorite color is green", response): "contradiction"})
    res = one(ConsistencyScorer(nli=nli), "What is your favorite color?", response, "green", "wh",
              "my favorite color is green")
    assert res["keywords"]["recall"] == 1.0
    assert (res["decision"], res["score"]) == ("nli_contradiction", 0.0)


@pytest.mark.parametrize("label,decision,score", [
    ("entailment", "long_answer_nli_entailment", 1.0), ("neutral", "long_answer_nli_no_entailment", 0.0)])
def test_wh_long_answer_is_judged_by_nli(label, decision, score):
    answer = "a man came in with a broken arm and leg after a crash"
    nli = TableNLI(default=label)
    res = one(ConsistencyScorer(nli=nli), "what was the worst case you saw ?", "a crash victim", answer, "wh")
    assert (res["decision"], res["score"]) == (decision, score)
    res = one(ConsistencyScorer(nli=None), "what was the worst case you saw ?", "a crash victim", answer, "wh")
    assert (res["decision"], res["score"]) == ("needs_nli", None)


def test_empty_response_scores_zero_without_nli():
    nli = TableNLI(default="entailment")
    scorer = ConsistencyScorer(nli=nli)
    for kind in ("yn", "wh"):
        res = one(scorer, "do you have a cat ?", "   ", "yes", kind)
        assert (res["decision"], res["score"]) == ("empty_response", 0.0)
    assert nli.calls == []


def test_nli_runs_once_for_a_batch_and_only_where_needed():
    nli = TableNLI(default="neutral")
    scorer = ConsistencyScorer(nli=nli)
    results = scorer.score(
        ["do you have a cat ?", "do you have a cat ?", "What color?", "do you drink coffee ?"],
        ["I don't.", "yes, a black one", "green", "tea only"],
        ["no", "yes", "green", "no"], ["yn", "yn", "wh", "yn"], ["F1", "F2", "F3", "F4"])
    assert [r["decision"] for r in results] == ["short_answer_agrees", "yes_no_word_agrees", "keyword_recall",
                                                "nli_no_entailment"]
    assert nli.calls == [[("F2", "yes, a black one"), ("F3", "green"), ("F4", "tea only")]]


def test_rules_only_summary_counts_undecided_and_unchecked():
    results = RULES_ONLY.score(["do you have a cat ?", "do you like tea ?", "What color?", "do you swim ?"],
                               ["I don't.", "I drink it daily", "green", "yes!"], ["no", "yes", "green", "yes"],
                               ["yn", "yn", "wh", "yn"], ["f"] * 4)
    summary = summarize(results, ["persona", "history", "persona", "history"])
    assert summary["all"] == {"score": 1.0, "n": 4, "decided": 3, "unchecked": 2}
    assert summary["source=history,type=yn"] == {"score": 1.0, "n": 2, "decided": 1, "unchecked": 1}
    assert summary["type=wh"]["score"] == 1.0 and summary["decisions"]["needs_nli"] == 1


def test_summary_by_source_and_type_means():
    nli = TableNLI(default="neutral")
    results = ConsistencyScorer(nli=nli).score(
        ["do you have a cat ?", "do you have a cat ?", "color?", "color?"], ["no", "yes", "green", "red"],
        ["no", "no", "green", "green"], ["yn", "yn", "wh", "wh"], ["f"] * 4)
    summary = summarize(results, ["persona", "history", "history", "persona"])
    assert summary["source=persona"]["score"] == pytest.approx(0.5)   # 1 (yn) and 0 (wh)
    assert summary["source=history"]["score"] == pytest.approx(0.5)   # 0 (yn) and 1 (wh)
    assert summary["type=yn"]["score"] == pytest.approx(0.5) and summary["all"]["n"] == 4
    with pytest.raises(ValueError, match="sources"):
        summarize(results, ["persona"])


def test_bad_input_is_a_clear_error():
    with pytest.raises(ValueError, match="same length"):
        RULES_ONLY.score(["q"], ["r", "s"], ["a"], ["yn"], ["f"])
    with pytest.raises(ValueError, match="type must be 'yn' or 'wh'"):
        RULES_ONLY.score(["q"], ["r"], ["a"], ["yes-no"], ["f"])
    with pytest.raises(ValueError, match="not a single string"):
        RULES_ONLY.score("q", "r", "a", "yn", "f")
    with pytest.raises(ValueError, match="must be a string"):
        RULES_ONLY.score(["q"], [None], ["a"], ["yn"], ["f"])
    with pytest.raises(ValueError, match="max_keywords"):
        ConsistencyScorer(nli=None, max_keywords=0)


# ------------------------------------------------------------------------------------ text rules


@pytest.mark.parametrize("text,expected", [
    ("i have two dogs", "i have 2 dogs"), ("twenty-one pilots", "21 pilots"), ("a hundred years", "100 years"),
    ("one hundred and five", "105"), ("three thousand two hundred", "3200"), ("no one knows", "no one knows"),
    ("the red one", "the red one"), ("a cat", "a cat"), ("fifty five", "55"),
])
def test_number_words(text, expected):
    assert words_to_numbers(text) == expected


def test_normalize_and_text_rules():
    assert normalize("Yes , I do n't know .") == "yes, i don't know."
    assert normalize("I ' m 25") == "i'm 25"
    assert yes_no_word("no one asked me")[0] is None
    assert yes_no_word("nothing much")[0] is None
    assert yes_no_word("absolutely not!")[:2] == ("no", "absolutely not")
    assert expected_polarity("no , i never have been  | no") == "no"
    assert expected_polarity("i've a sister | yes") == "yes"
    assert expected_polarity("i do not think so .") == "no"
    assert keyword_recall("over 1000", "I own over a thousand hats")[0] == 1.0
    assert strip_counter_question("I have two. What about you?") == "I have two."
    assert strip_counter_question("What? I have two.") == "What? I have two."


# ------------------------------------------------------------------------------------ NLI wrapper


def test_nli_callable_contracts():
    probs = NLI(lambda p, h: [{"ENTAILMENT": 0.7, "Neutral": 0.2, "contradiction": 0.1}] * len(p))
    out = probs.predict(["a"], ["b"])[0]
    assert out == {"label": "entailment", "entailment": 0.7, "neutral": 0.2, "contradiction": 0.1}
    labels = NLI(lambda p, h: ["CONTRADICTION"] * len(p)).predict(["a", "b"], ["c", "d"])
    assert [r["label"] for r in labels] == ["contradiction"] * 2 and labels[0]["contradiction"] == 1.0
    pipe_like = NLI(lambda p, h: [{"label": "neutral", "score": 0.9}] * len(p)).predict(["a"], ["b"])
    assert pipe_like[0]["label"] == "neutral"
    with pytest.raises(ValueError, match="LABEL_1"):
        NLI(lambda p, h: ["LABEL_1"] * len(p)).predict(["a"], ["b"])
    with pytest.raises(ValueError, match="returned 1 results for 2 pairs"):
        NLI(lambda p, h: ["neutral"]).predict(["a", "b"], ["c", "d"])
    with pytest.raises(ValueError, match="2 premises but 1 hypotheses"):
        NLI(lambda p, h: []).predict(["a", "b"], ["c"])
    assert NLI(lambda p, h: 1 / 0).predict([], []) == []


def test_nli_unavailable_names_the_model_and_the_fix(tmp_path):
    judge = NLI(str(tmp_path / "no-such-nli"))
    with pytest.raises(NLIUnavailable, match="no-such-nli.*To provide it"):
        judge.predict(["a"], ["b"])
    with pytest.raises(TypeError, match="NLI model id"):
        NLI(42).predict(["a"], ["b"])


@pytest.fixture(scope="module")
def tiny_nli():
    from test_q2 import wordpiece_tokenizer

    torch.manual_seed(0)
    tok = wordpiece_tokenizer(model_input_names=["input_ids", "attention_mask"])
    model = RobertaForSequenceClassification(RobertaConfig(
        vocab_size=len(tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
        max_position_embeddings=520, pad_token_id=0, num_labels=3, type_vocab_size=1,
        id2label={0: "contradiction", 1: "neutral", 2: "entailment"},
        label2id={"contradiction": 0, "neutral": 1, "entailment": 2})).double().eval()
    return model, tok


def test_nli_from_model_pair_pipeline_and_folder(tiny_nli, tmp_path):
    model, tok = tiny_nli
    premises, hypotheses = ["I keep three goats.", "My favorite color is green."], ["I have goats.", "I like red."]
    out = NLI((model, tok), batch_size=1).predict(premises, hypotheses)
    with torch.no_grad():
        enc = tok(premises, hypotheses, padding=True, return_tensors="pt")
        expected = model(**enc).logits.softmax(-1)
    for row, probs in zip(out, expected.tolist()):
        assert row["contradiction"] == pytest.approx(probs[0], abs=1e-5) and row["entailment"] == pytest.approx(probs[2], abs=1e-5)
        assert row["label"] == ("contradiction", "neutral", "entailment")[max(range(3), key=probs.__getitem__)]
    pipe = pipeline("text-classification", model=model, tokenizer=tok, device="cpu")
    from_pipe = NLI(pipe).predict(premises, hypotheses)
    assert [r["entailment"] for r in from_pipe] == pytest.approx([r["entailment"] for r in out], abs=1e-6)
    model.save_pretrained(tmp_path / "nli")
    tok.save_pretrained(tmp_path / "nli")
    loaded = NLI(str(tmp_path / "nli"), device="cpu").predict(premises, hypotheses)
    assert [r["label"] for r in loaded] == [r["label"] for r in out]


def test_hybrid_scorer_follows_a_real_model_labels(tiny_nli):
    """End to end with a tiny random RoBERTa: each decision matches what the model's label implies."""
    model, tok = tiny_nli
    judge = NLI((model, tok))
    questions = ["do you drink coffee ?", "do you have goats ?", "What color?", "do you have goats ?"]
    responses = ["I only drink tea.", "Yes, three of them.", "green like grass", "I don't."]
    facts = ["i don't drink coffee", "i keep three goats", "my favorite color is green", "i keep three goats"]
    results = ConsistencyScorer(nli=judge).score(questions, responses, ["no", "yes", "green", "yes"],
                                                 ["yn", "yn", "wh", "yn"], facts)
    labels = [r["label"] for r in judge.predict(facts[:3], responses[:3])]
    assert results[0]["score"] == float(labels[0] == "entailment")
    assert results[1]["score"] == float(labels[1] != "contradiction")
    assert results[2]["score"] == (0.0 if labels[2] == "contradiction" else 1.0)
    assert [r["nli_label"] for r in results[:3]] == labels
    assert (results[3]["decision"], results[3]["score"], results[3]["nli_label"]) == ("short_answer_disagrees", 0.0, None)


def test_nli_metric_in_the_scoring_registry():
    metric = get_metric("nli")
    judge = lambda p, h: [{"entailment": 0.8, "neutral": 0.15, "contradiction": 0.05} for _ in p]  # noqa: E731
    rows = metric(["doc one", "doc two"], [["hi"], ["hi"]], ["a reply", ""], nli_model=judge)
    assert rows[0] == {"nli_entailment": 0.8, "nli_neutral": 0.15, "nli_contradiction": 0.05}
    assert rows[1]["nli_entailment"] == 0.0   # an empty response entails nothing


def test_yes_no_counter_question_is_not_judged():
    nli = TableNLI({("i don't drink coffee", "I only drink tea."): "entailment"})
    res = one(ConsistencyScorer(nli=nli), "do you drink coffee ?", "I only drink tea. Do you like coffee?", "no", "yn",
              "i don't drink coffee")
    assert res["clean_response"] == "I only drink tea." and res["score"] == 1.0


@pytest.mark.parametrize("response,polarity", [
    ("no doubt, i love them", "yes"), ("no problem at all", None), ("sure thing", "yes"), ("nah.", "no"),
    ("not really, no", "no"), ("not a chance i would", None), ("yesterday i went", None),
])
def test_yes_no_words(response, polarity):
    assert yes_no_word(normalize(response))[0] == polarity


def test_question_without_auxiliary_gets_short_answers():
    from pmi_decode.metrics.consistency_rules import short_answer_polarity, short_answers

    forms = short_answers("you married ?")
    assert forms is not None
    assert short_answer_polarity(normalize("I'm not."), forms)[0] == "no"
    assert short_answer_polarity(normalize("I am, for ten years now"), forms)[0] == "yes"
    assert short_answer_polarity(normalize("i don't, sadly"), short_answers("you like dogs?"))[0] == "no"
    assert short_answer_polarity(normalize("she did!"), short_answers("she got the job?"))[0] == "yes"
    assert short_answers("ever been to spain?") is None and short_answers("any pets?") is None


def test_digits_with_a_scale_word_normalise_like_number_words():
    assert normalize("45 million") == normalize("forty five million") == "45000000"
    assert normalize("2.5 thousand") == "2500"


def test_long_alternatives_are_compared_too():
    scorer = ConsistencyScorer(nli=None, max_keywords=3)
    answer = "a dog | my neighbour's old grey cat called tom"
    [result] = scorer.score(["what pet do you have?"], ["my neighbour's old grey cat called tom"], [answer], ["wh"],
                            ["i have a cat."])
    assert result["keywords"]["recall"] == 1.0
    assert result["keywords"]["alternative"] == "my neighbour's old grey cat called tom"
