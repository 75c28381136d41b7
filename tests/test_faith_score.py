"""FaithScore: the coefficient file, the logistic model and its features, on hand-made rows."""

import json
import math
import zlib

import pytest

from pmi_decode.metrics.faith_score import FEATURES, FaithModel, features, lexical_features
from pmi_decode.metrics.token_aggregation import load_nlp
from pmi_decode.batch.scoring import available_metrics

NLP = load_nlp()
DOC = "Miles Davis recorded Kind of Blue in 1959 for Columbia Records."
HISTORY = ["Do you know the album Kind of Blue?"]
TOKENS = ["Yes", ",", " Miles", " Davis", " recorded", " it", " in", " 19", "59", ".", "<eos>"]


def spec(**over):
    base = {"features": ["cpmi_mean", "content_in_document"], "mean": [0.5, 0.5], "std": [1.0, 0.25],
            "coef": [1.0, 2.0], "intercept": -0.5, "scorer_model": "embedded"}
    return {**base, **over}


def test_probability_is_the_standardised_logistic():
    model = FaithModel.load(spec())
    row = {"cpmi_mean": 1.5, "content_in_document": 0.75}
    z = -0.5 + 1.0 * (1.5 - 0.5) / 1.0 + 2.0 * (0.75 - 0.5) / 0.25
    assert model.logit(row) == pytest.approx(z)
    assert model.probability(row) == pytest.approx(1 / (1 + math.exp(-z)))
    assert model.probability({"cpmi_mean": -1e4, "content_in_document": 0.0}) == pytest.approx(0.0)


def test_bad_coefficients_and_rows_are_clear_errors(tmp_path):
    with pytest.raises(ValueError, match="lack 'coef'"):
        FaithModel.load({k: v for k, v in spec().items() if k != "coef"})
    with pytest.raises(ValueError, match="differ in length"):
        FaithModel.load(spec(coef=[1.0]))
    with pytest.raises(ValueError, match="unknown features"):
        FaithModel.load(spec(features=["cpmi_mean", "magic"]))
    with pytest.raises(FileNotFoundError, match="no packaged FaithScore coefficients"):
        FaithModel.load("no-such-scorer")
    with pytest.raises(FileNotFoundError, match="not found"):
        FaithModel.load(tmp_path / "missing.json")
    path = tmp_path / "c.json"
    path.write_text(json.dumps(spec()))
    with pytest.raises(ValueError, match="needs features"):
        FaithModel.load(path).logit({"cpmi_mean": 1.0})


def test_lexical_features_count_a_wrong_year():
    good = lexical_features(DOC, HISTORY, "Yes, Miles Davis recorded it in 1959.", NLP)
    bad = lexical_features(DOC, HISTORY, "Yes, Miles Davis recorded it in 1972.", NLP)
    assert good["unsupported_content"] == 0.0 and bad["unsupported_content"] == 1.0
    assert bad["content_in_document"] < good["content_in_document"] == 1.0
    # stems match across inflections; words from the history are not "unsupported"
    assert lexical_features(DOC, HISTORY, "The album records Blue.", NLP)["unsupported_content"] == 0.0


def test_features_from_a_token_row_cover_every_feature_and_drop_eos():
    values = [1.0] * 10 + [-9.0]
    row = {"tokens": TOKENS, "token_cpmi": values, "token_upmi": values}
    out = features(row, DOC, HISTORY, "Yes, Miles Davis recorded it in 1959.", nlp=NLP, eos_token="<eos>")
    assert set(FEATURES) <= set(out)
    assert out["cpmi_mean"] == pytest.approx(1.0)  # the EOS value is left out
    wrong = list(values)
    wrong[7] = wrong[8] = -2.0
    bad = features({**row, "token_cpmi": wrong}, DOC, HISTORY, "Yes, Miles Davis recorded it in 1959.", nlp=NLP,
                   eos_token="<eos>")
    assert bad["cpmi_low3"] < out["cpmi_low3"] and bad["cpmi_supported_share"] < out["cpmi_supported_share"]


LIBRARY = ("The library is open 9 am to 8 pm on weekdays and 10 am to 4 pm on Saturdays. "
           "Members can borrow 12 books for 3 weeks.")


def test_features_count_facts_wrong_in_context():
    """Every unit of "9 am to 4 pm" is in the document, so the unsupported counts stay 0; the
    range is not one the document holds, and "3 books" takes the 3 of "3 weeks"."""
    def row_of(response):
        tokens = response.split() + ["<eos>"]
        return features({"tokens": tokens, "token_cpmi": [1.0] * len(tokens), "token_upmi": [1.0] * len(tokens)},
                        LIBRARY, [], response, nlp=NLP, eos_token="<eos>")

    right = row_of("It is open 9 am to 8 pm on weekdays.")
    joined = row_of("It is open 9 am to 4 pm on weekdays.")
    counted = row_of("You can borrow up to 3 books.")
    for row in (right, joined, counted):
        assert row["unsupported_numbers"] == 0.0 and row["fact_support_share"] == 1.0
    assert right["wrong_facts_in_context"] == 0.0
    for row in (joined, counted):
        assert row["wrong_facts_in_context"] == row["wrong_numbers_in_context"] == 1.0
        assert row["wrong_names_in_context"] == 0.0


def test_registered_in_the_score_registry():
    assert {"faith_score", "pmi_faith_words"} <= set(available_metrics())


def test_packaged_coefficients_are_valid_when_present():
    from importlib import resources

    folder = resources.files("pmi_decode.metrics") / "faith_score_coefficients"
    files = [p for p in folder.iterdir() if p.name.endswith(".json")] if folder.is_dir() else []
    assert files, "no packaged FaithScore coefficients"
    for path in files:
        model = FaithModel.load(json.loads(path.read_text()))
        assert path.name[:-5] == model.spec["scorer_model"]
        assert all(s > 0 for s in model.spec["std"])
        assert model.spec["fitted_on"]["begin"]["num_rows"] > 0 and model.spec["fitted_on"]["audit"]["num_rows"] > 0
        assert model.spec["features"] and set(model.spec["features"]) <= set(FEATURES)


@pytest.mark.slow
def test_embedded_faith_score_drops_for_one_wrong_fact():
    """End to end with the packaged SmolLM2 coefficients: one wrong year or label lowers the score."""
    from pmi_decode.metrics import FaithScore

    faith = FaithScore("embedded")
    doc = "Miles Davis recorded Kind of Blue in 1959 for Columbia Records."
    responses = ["Yes, Miles Davis recorded it in 1959 for Columbia.",
                 "Yes, Miles Davis recorded it in 1972 for Columbia.",
                 "Yes, Miles Davis recorded it in 1959 for Motown."]
    good, wrong_year, wrong_label = faith.score([doc] * 3, [HISTORY] * 3, responses)
    for bad in (wrong_year, wrong_label):
        assert bad["faith_score"] < good["faith_score"]
        assert bad["cpmi_low3"] < good["cpmi_low3"] and bad["unsupported_content"] > good["unsupported_content"]
        assert bad["fact_support_share"] < good["fact_support_share"] == 1.0
    assert wrong_year["unsupported_numbers"] == 1.0 and wrong_label["unsupported_entities"] == 1.0
    assert 0.0 < wrong_year["faith_score"] < 1.0


def test_faith_score_end_to_end_on_a_tiny_model():
    from tiny_models import tiny_model, tiny_tokenizer

    from pmi_decode.metrics import FaithScore, PMIFaith

    pmi = PMIFaith(tiny_model("llama"), tiny_tokenizer("llama"), include_eos=True, allow_empty_history=True)
    with pytest.raises(ValueError, match="pass coefficients"):
        FaithScore(pmi)
    faith = FaithScore(pmi, coefficients=spec())
    rows = faith.score([DOC, DOC], [HISTORY, []], ["Yes, Miles Davis recorded it in 1959.", "It was 1972."])
    for row in rows:
        assert 0.0 < row["faith_score"] < 1.0
        assert row["faith_score"] == pytest.approx(FaithModel.load(spec()).probability(row))
    with pytest.raises(FileNotFoundError, match="no packaged FaithScore coefficients"):
        FaithScore("org/unknown-model")  # fails before any model is loaded
    for coefficients in ("embedded", dict(spec(), scorer_model="embedded")):  # fitted for another scorer
        with pytest.raises(ValueError, match="fitted with scorer 'embedded', not 'embedded-gemma'"):
            FaithScore("embedded-gemma", coefficients=coefficients)  # refused before any model is loaded


def test_fact_features_reach_the_score_and_the_encoder_loads_only_when_needed():
    """A coefficient file that uses the fact counts and the sentence-encoder similarity: FaithScore
    computes both at score time, and one wrong year lowers the probability."""
    from tiny_models import tiny_model, tiny_tokenizer

    from pmi_decode.metrics import FaithScore, PMIFaith

    class CountingEncoder:
        calls = 0

        def encode(self, texts):
            import torch

            CountingEncoder.calls += 1
            out = torch.zeros(len(texts), 4096)  # word counts by CRC32 (stable across runs, unlike hash)
            for i, text in enumerate(texts):
                for word in text.lower().replace(".", " ").split():
                    out[i, zlib.crc32(word.encode()) % 4096] += 1.0
            return torch.nn.functional.normalize(out, dim=-1)

    pmi = PMIFaith(tiny_model("llama"), tiny_tokenizer("llama"), include_eos=True, allow_empty_history=True)
    facts = spec(features=["unsupported_numbers", "fact_support_share", "doc_sentence_cosine"], mean=[0.5, 0.8, 0.5],
                 std=[1.0, 0.2, 0.2], coef=[-1.0, 1.0, 0.5])
    encoder = CountingEncoder()
    faith = FaithScore(pmi, coefficients=facts, sentence_encoder=encoder)
    good, bad = faith.score([DOC, DOC], [HISTORY, HISTORY], ["Yes, Miles Davis recorded it in 1959.",
                                                             "Yes, Miles Davis recorded it in 1972."])
    assert encoder.calls == 1
    assert bad["unsupported_numbers"] == 1.0 and good["unsupported_numbers"] == 0.0
    assert bad["doc_sentence_cosine"] < good["doc_sentence_cosine"]
    assert bad["faith_score"] < good["faith_score"]
    FaithScore(pmi, coefficients=spec(), sentence_encoder=encoder).score([DOC], [HISTORY], ["In 1959."])
    assert encoder.calls == 1  # no semantic feature in that file: the encoder is not run


def test_wrong_fact_counts_reach_the_score():
    """A coefficient file that uses the in-context counts: FaithScore computes them at score time
    (a row without them would be refused by FaithModel.logit), and a joined range lowers the score."""
    from tiny_models import tiny_model, tiny_tokenizer

    from pmi_decode.metrics import FaithScore, PMIFaith

    pmi = PMIFaith(tiny_model("llama"), tiny_tokenizer("llama"), include_eos=True, allow_empty_history=True)
    wrong = spec(features=["wrong_facts_in_context", "wrong_numbers_in_context"], mean=[0.2, 0.1], std=[0.5, 0.3],
                 coef=[-1.0, -0.5])
    good, bad = FaithScore(pmi, coefficients=wrong).score(
        [LIBRARY, LIBRARY], [[], []], ["It is open 9 am to 8 pm on weekdays.", "It is open 9 am to 4 pm on weekdays."])
    assert good["wrong_facts_in_context"] == 0.0 and bad["wrong_facts_in_context"] == 1.0
    assert bad["wrong_numbers_in_context"] == 1.0 and bad["wrong_names_in_context"] == 0.0
    assert bad["faith_score"] < good["faith_score"]
    assert bad["faith_score"] == pytest.approx(FaithModel.load(wrong).probability(bad))
