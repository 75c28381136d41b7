"""How well a faithfulness metric agrees with human labels: the BEGIN meta-evaluation protocol.

Protocol (Honovich et al. 2021 for Q², reused by Nandwani et al. 2023 for PMI-Faith): min-max
normalise a metric with the min and max of the calibration (dev) scores, choose the threshold
that maximises F1 of the positive (faithful) class on the calibration set, then report
precision, recall, F1 and accuracy of that threshold on the test set, with F1 per data source;
and the calibration-free Spearman and Pearson correlations and AUROC on the test set.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np


def _arrays(scores, labels=None):
    scores = np.asarray(scores, dtype=float)
    if scores.ndim != 1 or scores.size == 0:
        raise ValueError("scores must be a non-empty 1-d sequence of numbers")
    if not np.all(np.isfinite(scores)):
        raise ValueError(f"scores hold {int((~np.isfinite(scores)).sum())} NaN or infinite values")
    if labels is None:
        return scores
    labels = np.asarray(labels)
    if labels.shape != scores.shape:
        raise ValueError(f"got {scores.size} scores but {labels.size} labels")
    if not np.all(np.isin(labels, (0, 1, True, False))):
        raise ValueError("labels must be 0/1 (1 = faithful)")
    return scores, labels.astype(int)


def minmax_fit(scores: Sequence[float]) -> tuple[float, float]:
    scores = _arrays(scores)
    return float(scores.min()), float(scores.max())


def minmax_normalize(scores: Sequence[float], low: float, high: float) -> np.ndarray:
    """``(s - low) / (high - low)`` with the calibration ``low``/``high`` (values outside are not clipped)."""
    scores = np.asarray(scores, dtype=float)
    if high == low:
        return np.zeros_like(scores)
    return (scores - low) / (high - low)


def classification_metrics(scores, labels, threshold: float) -> dict:
    """Precision, recall, F1 (positive class) and accuracy of ``score >= threshold``."""
    scores, labels = _arrays(scores, labels)
    predicted = scores >= threshold
    tp = int(np.sum(predicted & (labels == 1)))
    fp = int(np.sum(predicted & (labels == 0)))
    fn = int(np.sum(~predicted & (labels == 1)))
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {
        "precision": precision,
        "recall": recall,
        "f1": f1,
        "accuracy": float(np.mean(predicted == (labels == 1))),
    }


def best_f1_threshold(scores, labels) -> tuple[float, float]:
    """The threshold among the observed scores with the highest F1 of ``score >= threshold``.

    Ties go to the highest threshold (the most conservative one). Returns ``(threshold, f1)``.
    """
    scores, labels = _arrays(scores, labels)
    if labels.sum() == 0:
        raise ValueError("the calibration labels hold no positive (faithful) example")
    order = np.argsort(-scores, kind="stable")
    sorted_scores, sorted_labels = scores[order], labels[order]
    tp = np.cumsum(sorted_labels)
    predicted = np.arange(1, len(scores) + 1)
    # Only the last position of each run of equal scores is a valid cut.
    last = np.r_[sorted_scores[1:] != sorted_scores[:-1], True]
    f1 = 2 * tp / (predicted + labels.sum())
    f1 = np.where(last, f1, -1.0)
    best = int(np.argmax(f1))  # first maximum = highest threshold
    return float(sorted_scores[best]), float(f1[best])


def correlations(scores, labels) -> dict:
    """Spearman and Pearson correlation with the 0/1 labels, and AUROC (scipy, scikit-learn)."""
    from scipy.stats import pearsonr, spearmanr
    from sklearn.metrics import roc_auc_score

    scores, labels = _arrays(scores, labels)
    if labels.min() == labels.max():
        raise ValueError("correlations need both faithful and unfaithful examples")
    return {
        "spearman": float(spearmanr(scores, labels).statistic),
        "pearson": float(pearsonr(scores, labels).statistic),
        "auroc": float(roc_auc_score(labels, scores)),
    }


def evaluate(
    dev_scores,
    dev_labels,
    test_scores,
    test_labels,
    test_sources: Sequence[str] | None = None,
) -> dict:
    """The whole protocol for one metric: calibrate on dev, report on test."""
    dev_scores, dev_labels = _arrays(dev_scores, dev_labels)
    test_scores, test_labels = _arrays(test_scores, test_labels)
    low, high = minmax_fit(dev_scores)
    threshold, dev_f1 = best_f1_threshold(minmax_normalize(dev_scores, low, high), dev_labels)
    test_norm = minmax_normalize(test_scores, low, high)
    result = {
        "threshold": threshold,
        "dev_f1": dev_f1,
        **classification_metrics(test_norm, test_labels, threshold),
        **correlations(test_scores, test_labels),
    }
    if test_sources is not None:
        result["f1_per_source"] = f1_per_source(test_norm >= threshold, test_labels, test_sources)
    return result


def f1_per_source(predicted, labels, sources) -> dict:
    """F1 of the positive class within each data source."""
    predicted, labels, sources = np.asarray(predicted, bool), np.asarray(labels, int), np.asarray(sources)
    if not (predicted.shape == labels.shape == sources.shape):
        raise ValueError("predicted, labels and sources must have the same length")
    out = {}
    for source in sorted(set(sources.tolist())):
        mask = sources == source
        out[source] = classification_metrics(predicted[mask].astype(float), labels[mask], 0.5)["f1"]
    return out


def stratified_folds(strata: Sequence, num_folds: int, seed: int = 0) -> np.ndarray:
    """Fold index of each item, balanced within each stratum (e.g. source x label)."""
    if num_folds < 2:
        raise ValueError(f"num_folds must be >= 2, got {num_folds}")
    from sklearn.model_selection import StratifiedKFold

    strata = np.asarray([str(s) for s in strata])
    folds = np.zeros(len(strata), dtype=int)
    splitter = StratifiedKFold(n_splits=num_folds, shuffle=True, random_state=seed)
    for fold, (_, test_index) in enumerate(splitter.split(np.zeros(len(strata)), strata)):
        folds[test_index] = fold
    return folds


def cross_validated(scores, labels, sources, folds) -> dict:
    """The protocol with k-fold calibration: each fold is thresholded with a threshold (and
    min-max range) fit on the other folds; precision/recall/F1/accuracy and per-source F1 are
    computed over the pooled out-of-fold predictions; correlations and AUROC over all items.
    Also reports the mean and standard deviation of the per-fold test F1.
    """
    scores, labels = _arrays(scores, labels)
    sources, folds = np.asarray(sources), np.asarray(folds)
    predicted = np.zeros(len(scores), dtype=bool)
    fold_f1, thresholds = [], []
    for fold in sorted(set(folds.tolist())):
        test, dev = folds == fold, folds != fold
        low, high = minmax_fit(scores[dev])
        threshold, _ = best_f1_threshold(minmax_normalize(scores[dev], low, high), labels[dev])
        predicted[test] = minmax_normalize(scores[test], low, high) >= threshold
        thresholds.append(threshold)
        fold_f1.append(classification_metrics(predicted[test].astype(float), labels[test], 0.5)["f1"])
    return {
        **classification_metrics(predicted.astype(float), labels, 0.5),
        **correlations(scores, labels),
        "f1_per_source": f1_per_source(predicted, labels, sources),
        "fold_f1_mean": float(np.mean(fold_f1)),
        "fold_f1_std": float(np.std(fold_f1)),
        "thresholds": thresholds,
    }
