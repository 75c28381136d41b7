"""Overlap metrics: SQuAD-style unigram F1, sentence BLEU (sacrebleu), ROUGE-L (rouge-score)."""

import pytest
import sacrebleu

from pmi_decode.metrics.overlap import bleu, rouge_l, unigram_f1
from pmi_decode.metrics.text import normalize_answer, token_f1


def test_normalisation_is_squad_style():
    assert normalize_answer("The  Cat, sat on a MAT!") == "cat sat on mat"


def test_unigram_f1_by_hand():
    # pred {cat, sat} vs ref {cat, sat, on, mat}: P 1, R 1/2 -> 2/3
    assert unigram_f1(["The cat sat."], ["a cat sat on the mat"]) == [pytest.approx(2 / 3)]
    assert unigram_f1(["dog dog"], ["dog"]) == [pytest.approx(2 / 3)]  # counts clip: P 1/2, R 1
    assert unigram_f1(["", "x"], ["y", "y"]) == [0.0, 0.0]


def test_one_normalisation_and_one_token_f1_behind_every_old_name():
    from pmi_decode.metrics import overlap, q2_text

    assert overlap.normalize_answer is q2_text.normalize_answer is normalize_answer
    assert q2_text.token_f1 is token_f1
    pairs = [("The cat sat.", "a cat sat on the mat"), ("dog dog", "dog"), ("", "y"),
             ("Miles Davis", "Davis, Coltrane")]
    assert unigram_f1([p for p, _ in pairs], [r for _, r in pairs]) == [token_f1(r, p) for p, r in pairs]
    assert token_f1("Miles Davis", "Davis and Coltrane") == pytest.approx(0.4)  # P 1/3, R 1/2


def test_bleu_is_sentence_bleu_per_pair():
    preds, refs = ["the cat sat on the mat", "a dog barked loudly today"], ["the cat sat on the mat", "the cat sat"]
    scores = bleu(preds, refs)
    assert scores[0] == pytest.approx(100.0)
    assert scores[1] == pytest.approx(sacrebleu.sentence_bleu(preds[1], [refs[1]]).score)
    assert 0.0 <= scores[1] < 10.0


def test_rouge_l_by_hand():
    # LCS "the cat sat" = 3 tokens; P 3/3, R 3/6 -> 2/3
    assert rouge_l(["the cat sat"], ["the cat sat on the mat"]) == [pytest.approx(2 / 3)]
    # stemmed: "cats running" and "cat runs" are both "cat run"
    assert rouge_l(["cats running"], ["cat runs"]) == [pytest.approx(1.0)]
    # stemmed "run dog" vs "the dog run": LCS 1, P 1/2, R 1/3 -> 0.4
    assert rouge_l(["running dogs"], ["the dog runs"]) == [pytest.approx(0.4)]


def test_length_mismatch_and_strings_are_rejected():
    for fn in (unigram_f1, bleu, rouge_l):
        with pytest.raises(ValueError, match="1 predictions but 2 references"):
            fn(["a"], ["a", "b"])
        with pytest.raises(ValueError, match="lists"):
            fn("a", ["a"])
