"""The reader measures in the Table-4 report and the sweep report."""

import pytest

from pmi_decode.metrics.reader import copy_rate, corpus_distinct_n, distinct_n
from pmi_decode.experiments.report import ResponseSet, add_reader_measures, reader_markdown, score_response_set, summarise


class KeywordChecker:
    def count_errors(self, texts):
        return [t.split().count("bad") for t in texts]


class BagOfWordsEncoder:
    vocab = ["paris", "tower", "jazz", "bad"]

    def encode(self, texts):
        import torch

        rows = torch.tensor([[float(t.lower().split().count(v)) + (0.0 if i else 1e-3) for i, v in
                              enumerate(self.vocab)] for t in texts])
        return torch.nn.functional.normalize(rows, dim=-1)


def _set():
    return ResponseSet(method="beam search", objective="PMI", ids=["a", "b"],
                       documents=["the tower is in paris", "jazz from new orleans"],
                       histories=[["where is the tower"], ["do you like jazz"]],
                       responses=["the tower is in paris", "bad bad bad bad"],
                       golds=["it is in paris", "yes i love jazz"])


def test_scored_sets_carry_the_reader_measures_and_their_means():
    rs = score_response_set(_set(), grammar_checker=KeywordChecker(), sentence_encoder=BagOfWordsEncoder())
    assert [r["copy_rate"] for r in rs.scores] == copy_rate(rs.responses, rs.documents) == [1.0, 0.0]
    assert [r["distinct_2"] for r in rs.scores] == distinct_n(rs.responses, 2) == [1.0, pytest.approx(1 / 3)]
    assert rs.scores[0]["answers_question"] > rs.scores[1]["answers_question"]
    summary = summarise([rs])[0][0]
    assert summary["copy_rate"] == pytest.approx(0.5)
    assert summary["corpus_distinct_2"] == pytest.approx(corpus_distinct_n(rs.responses, 2))
    assert summary["repeated_3gram_rate"] == pytest.approx((0 + 1 / 2) / 2)
    table = reader_markdown([summary])
    assert "| beam search | PMI |" in table and "| 25.0% | 50.0% |" in table  # repeated 3-grams, grammar


def test_old_score_files_get_the_measures_and_an_unloadable_encoder_falls_back_with_a_note(tmp_path):
    rs = _set()
    rs.scores = [{"id": "a", "rouge_l": 0.5}, {"id": "b", "rouge_l": 0.0}]
    add_reader_measures(rs, sentence_encoder=str(tmp_path / "no-such-encoder"))
    assert rs.scores[0]["rouge_l"] == 0.5  # what was there is kept
    assert rs.scores[0]["answers_question"] == rs.scores[0]["question_overlap"]
    assert "lexical content-word overlap" in rs.notes["answers_question"]
    assert "lexical content-word overlap" in reader_markdown(summarise([rs])[0])
