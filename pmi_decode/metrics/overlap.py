"""Lexical overlap between each response and its document: unigram F1, BLEU and ROUGE-L.

These are the overlap baselines of the faithfulness literature (Dziri et al. 2022; Honovich et
al. 2021): a response that copies the document scores high whether or not it answers the user.
Each function takes parallel lists and returns one float per pair.
"""

from __future__ import annotations

from typing import Sequence

from .text import normalize_answer, token_f1

__all__ = ["normalize_answer", "unigram_f1", "bleu", "rouge_l"]  # normalize_answer lives in .text


def _check_pairs(predictions: Sequence[str], references: Sequence[str]) -> None:
    if isinstance(predictions, str) or isinstance(references, str):
        raise ValueError("predictions and references must be lists of strings, not a single string")
    if len(predictions) != len(references):
        raise ValueError(f"got {len(predictions)} predictions but {len(references)} references")


def unigram_f1(predictions: Sequence[str], references: Sequence[str]) -> list[float]:
    """Token-level F1 of each prediction against its reference, SQuAD style (0..1; see
    :func:`.text.token_f1`)."""
    _check_pairs(predictions, references)
    return [token_f1(r, p) for p, r in zip(predictions, references)]


def bleu(predictions: Sequence[str], references: Sequence[str]) -> list[float]:
    """Sentence BLEU of each prediction against its one reference (sacrebleu defaults, 0..100)."""
    import sacrebleu

    _check_pairs(predictions, references)
    metric = sacrebleu.metrics.BLEU(effective_order=True)
    return [metric.sentence_score(p, [r]).score for p, r in zip(predictions, references)]


def rouge_l(predictions: Sequence[str], references: Sequence[str]) -> list[float]:
    """ROUGE-L F-measure of each prediction against its reference (rouge-score, stemmed, 0..1)."""
    from rouge_score import rouge_scorer

    _check_pairs(predictions, references)
    scorer = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True)
    return [scorer.score(r, p)["rougeL"].fmeasure for p, r in zip(predictions, references)]
