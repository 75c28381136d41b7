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


# ------------------------------------------------------------------------------ BEGIN's three classes
#
# BEGIN (Dziri et al., TACL 2022) labels each response fully attributable, generic or not fully
# attributable, and asks whether a metric separates all three, not only faithful from the rest.

BEGIN_CLASSES = ("Not fully attributable", "Generic", "Fully attributable")  # expected order of the scores


def _classes(scores, classes):
    scores = _arrays(scores)
    classes = np.asarray([str(c) for c in classes])
    if classes.shape != scores.shape:
        raise ValueError(f"got {scores.size} scores but {classes.size} class labels")
    return scores, classes


def class_distributions(scores, classes) -> dict:
    """Per class: n, mean, standard deviation and quartiles of the scores."""
    scores, classes = _classes(scores, classes)
    out = {}
    for name in sorted(set(classes.tolist()), key=lambda c: (BEGIN_CLASSES.index(c) if c in BEGIN_CLASSES else 9, c)):
        values = scores[classes == name]
        q = np.quantile(values, [0.0, 0.25, 0.5, 0.75, 1.0])
        out[name] = {"n": int(values.size), "mean": float(values.mean()), "std": float(values.std()),
                     "min": float(q[0]), "q25": float(q[1]), "median": float(q[2]), "q75": float(q[3]), "max": float(q[4])}
    return out


def pairwise_auroc(scores, classes, order: Sequence[str] = BEGIN_CLASSES) -> dict:
    """AUROC of each pair of classes, the class later in ``order`` as the positive one.

    0.5 means the metric does not tell the two apart; "Fully attributable vs Generic" near 0.5
    (or below) is BEGIN's observation that metrics confuse generic with attributable responses.
    """
    from sklearn.metrics import roc_auc_score

    scores, classes = _classes(scores, classes)
    out = {}
    for hi in range(len(order)):
        for lo in range(hi):
            mask = (classes == order[hi]) | (classes == order[lo])
            if (classes == order[hi]).any() and (classes == order[lo]).any():
                out[f"{order[hi]} vs {order[lo]}"] = float(roc_auc_score(classes[mask] == order[hi], scores[mask]))
    return out


def fit_two_thresholds(scores, classes, *, order: Sequence[str] | None = None, objective: str = "accuracy") -> dict:
    """Two thresholds t1 <= t2 that best split three classes: ``s < t1``, ``t1 <= s < t2``, ``s >= t2``.

    ``order`` names the class of the low, middle and high region; None tries every order of the
    classes present (BEGIN's expected order first, kept on ties) and keeps the best. ``objective``
    is ``"accuracy"`` or ``"macro_f1"``. Thresholds are observed scores or ``inf`` (an empty top
    region). Returns ``order``, ``thresholds``, ``accuracy`` and ``macro_f1`` on the fitting data.
    """
    from itertools import permutations

    if objective not in ("accuracy", "macro_f1"):
        raise ValueError(f"objective must be 'accuracy' or 'macro_f1', got {objective!r}")
    scores, classes = _classes(scores, classes)
    present = [c for c in BEGIN_CLASSES if c in set(classes.tolist())] + sorted(set(classes.tolist()) - set(BEGIN_CLASSES))
    if len(present) != 3:
        raise ValueError(f"three classes are needed, got {present}")
    candidates = [tuple(order)] if order is not None else [tuple(present)] + [p for p in permutations(present)
                                                                              if p != tuple(present)]
    cuts = np.r_[np.unique(scores), np.inf]
    below = {c: np.searchsorted(np.sort(scores[classes == c]), cuts, side="left") for c in present}
    totals = {c: int((classes == c).sum()) for c in present}
    n = scores.size
    i, j = np.triu_indices(cuts.size)
    predicted_low = sum(below[c] for c in present)
    best = None
    for low, mid, high in candidates:
        if sorted((low, mid, high)) != sorted(present):
            raise ValueError(f"order must name the classes {present}, got {list((low, mid, high))}")
        tp = (below[low][i], below[mid][j] - below[mid][i], totals[high] - below[high][j])
        if objective == "accuracy":
            value = (tp[0] + tp[1] + tp[2]) / n
        else:
            pred = (predicted_low[i], predicted_low[j] - predicted_low[i], n - predicted_low[j])
            value = sum(2 * t / np.maximum(p + totals[c], 1) for t, p, c in zip(tp, pred, (low, mid, high))) / 3
        k = int(np.argmax(value))
        if best is None or value[k] > best[0] + 1e-12:
            best = (float(value[k]), (low, mid, high), (float(cuts[i[k]]), float(cuts[j[k]])))
    _, chosen, thresholds = best
    metrics = three_way_metrics(three_way_predict(scores, chosen, thresholds), classes, chosen)
    return {"order": list(chosen), "thresholds": list(thresholds), "objective": objective,
            "accuracy": metrics["accuracy"], "macro_f1": metrics["macro_f1"]}


def three_way_predict(scores, order: Sequence[str], thresholds: Sequence[float]) -> np.ndarray:
    """The class of each score: ``order[0]`` below ``t1``, ``order[1]`` up to ``t2``, ``order[2]`` from ``t2``."""
    scores = np.asarray(scores, dtype=float)
    t1, t2 = thresholds
    region = (scores >= t1).astype(int) + (scores >= t2).astype(int)
    return np.asarray(order, dtype=object)[region].astype(str)


def three_way_metrics(predicted, classes, order: Sequence[str] = BEGIN_CLASSES) -> dict:
    """Accuracy, macro-F1, F1 per class and the confusion matrix (true -> predicted -> count)."""
    predicted, classes = np.asarray(predicted).astype(str), np.asarray(classes).astype(str)
    f1 = {}
    for name in order:
        tp = int(np.sum((predicted == name) & (classes == name)))
        denominator = int(np.sum(predicted == name) + np.sum(classes == name))
        f1[name] = 2 * tp / denominator if denominator else 0.0
    confusion = {t: {p: int(np.sum((classes == t) & (predicted == p))) for p in order} for t in order}
    return {"accuracy": float(np.mean(predicted == classes)), "macro_f1": float(np.mean(list(f1.values()))),
            "f1_per_class": f1, "confusion": confusion}


def three_way_evaluate(dev_scores, dev_classes, test_scores, test_classes, *, order=None,
                       objective: str = "accuracy") -> dict:
    """Fit the two thresholds (and, with ``order=None``, the class order) on dev; report on test."""
    fit = fit_two_thresholds(dev_scores, dev_classes, order=order, objective=objective)
    test_scores, test_classes = _classes(test_scores, test_classes)
    metrics = three_way_metrics(three_way_predict(test_scores, fit["order"], fit["thresholds"]), test_classes,
                                fit["order"])
    return {**metrics, "order": fit["order"], "thresholds": fit["thresholds"], "dev_accuracy": fit["accuracy"],
            "dev_macro_f1": fit["macro_f1"], "objective": objective}


def three_way_cross_validated(scores, classes, folds, *, order=None, objective: str = "accuracy") -> dict:
    """The three-way view with k-fold calibration: each fold is classified with thresholds (and
    order) fitted on the other folds; metrics over the pooled out-of-fold predictions."""
    scores, classes = _classes(scores, classes)
    folds = np.asarray(folds)
    predicted = np.empty(scores.size, dtype=object)
    fits = []
    for fold in sorted(set(folds.tolist())):
        test = folds == fold
        fit = fit_two_thresholds(scores[~test], classes[~test], order=order, objective=objective)
        predicted[test] = three_way_predict(scores[test], fit["order"], fit["thresholds"])
        fits.append({"order": fit["order"], "thresholds": fit["thresholds"]})
    orders = [tuple(f["order"]) for f in fits]
    common = max(set(orders), key=orders.count)
    report_order = list(common) if order is None else list(order)
    return {**three_way_metrics(predicted.astype(str), classes, report_order), "order": report_order,
            "folds": fits, "objective": objective}


def generic_confusion(scores, classes, threshold: float) -> dict:
    """The share of each class that a binary faithful-vs-rest threshold calls faithful.

    BEGIN's observation in numbers: if generic responses pass the threshold about as often as
    fully attributable ones (and much more often than not-attributable ones), the metric
    rewards saying nothing.
    """
    scores, classes = _classes(scores, classes)
    return {name: float(np.mean(scores[classes == name] >= threshold))
            for name in BEGIN_CLASSES if (classes == name).any()}


# ---------------------------------------------------------------------------- system-level correlation
#
# Q² (Honovich et al., 2021) also judges metrics on systems, not single responses: simulated
# systems mix consistent and inconsistent responses at an inconsistency rate c, and a good metric's
# system mean falls as c rises.

SYSTEM_RATES = (0.05, 0.1, 0.15, 0.2, 0.25)


def simulate_systems(labels, *, rates: Sequence[float] = SYSTEM_RATES, n_per_system: int = 100,
                     repetitions: int = 10, seed: int = 0) -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
    """Simulated systems over an annotated set: for each rate c and repetition, ``round(c * n)``
    responses drawn without replacement from the inconsistent (label 0) pool and the rest from
    the consistent (label 1) pool. Returns ``(index arrays, human scores, rates)``; a system's human
    score is its share of consistent responses."""
    labels = np.asarray(labels).astype(int)
    if not np.all(np.isin(labels, (0, 1))):
        raise ValueError("labels must be 0/1 (1 = consistent / faithful)")
    if isinstance(n_per_system, bool) or not isinstance(n_per_system, (int, np.integer)) or n_per_system < 2:
        raise ValueError(f"n_per_system must be an integer >= 2, got {n_per_system!r}")
    if isinstance(repetitions, bool) or not isinstance(repetitions, (int, np.integer)) or repetitions < 1:
        raise ValueError(f"repetitions must be a positive integer, got {repetitions!r}")
    rates = [float(c) for c in rates]
    if not rates or any(not 0 <= c <= 1 for c in rates):
        raise ValueError(f"rates must be inconsistency rates in [0, 1], got {rates}")
    consistent, inconsistent = np.flatnonzero(labels == 1), np.flatnonzero(labels == 0)
    need_bad = max(int(round(c * n_per_system)) for c in rates)
    need_good = max(n_per_system - int(round(c * n_per_system)) for c in rates)
    if need_bad > inconsistent.size or need_good > consistent.size:
        raise ValueError(f"n_per_system={n_per_system} needs {need_good} consistent and {need_bad} inconsistent "
                         f"responses per system, but the set has {consistent.size} and {inconsistent.size}; "
                         f"use a smaller n_per_system")
    rng = np.random.default_rng(seed)
    systems, human, system_rates = [], [], []
    for c in rates:
        bad = int(round(c * n_per_system))
        for _ in range(repetitions):
            idx = np.r_[rng.choice(inconsistent, bad, replace=False), rng.choice(consistent, n_per_system - bad,
                                                                                 replace=False)]
            systems.append(idx)
            human.append(1 - bad / n_per_system)
            system_rates.append(c)
    return systems, np.asarray(human), np.asarray(system_rates)


def _system_spearman(values: np.ndarray, systems: list[np.ndarray], human: np.ndarray) -> float:
    from scipy.stats import spearmanr

    means = values[np.asarray(systems)].mean(axis=1)  # every system has n_per_system responses
    if np.ptp(means) == 0:
        return float("nan")
    return float(spearmanr(means, human).statistic)


def system_level_correlation(scores, labels, *, rates: Sequence[float] = SYSTEM_RATES, n_per_system: int = 100,
                             repetitions: int = 10, seed: int = 0, n_bootstrap: int = 1000,
                             confidence: float = 0.95, n_simulations: int = 100) -> dict:
    """Spearman correlation of each metric's system mean with the human system score (Q²'s
    system-level analysis), with a bootstrap interval.

    ``scores``: one array, or a dict ``{metric: array}`` (all metrics are judged on the same
    simulated systems). The interval resamples the annotated set (within each label, with
    replacement) and simulates new systems ``n_bootstrap`` times with seeds derived from
    ``seed``; it covers both the choice of responses and of systems. Deterministic for a seed.
    One set of ``len(rates) * repetitions`` systems gives a noisy correlation, so ``spearman`` is
    the mean over ``n_simulations`` independent sets of systems drawn from the whole annotated
    set (``simulation_sd``: their standard deviation); ``spearman_first`` is the first set's.
    Returns ``{metric: {"spearman", "simulation_sd", "spearman_first", "ci_low", "ci_high",
    "mean_by_rate"}}`` plus ``"_setup"``.
    """
    single = not isinstance(scores, dict)
    metrics = {"score": scores} if single else dict(scores)
    labels = np.asarray(labels).astype(int)
    arrays = {}
    for name, values in metrics.items():
        values = _arrays(values)
        if values.shape != labels.shape:
            raise ValueError(f"{name}: got {values.size} scores but {labels.size} labels")
        arrays[name] = values
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    systems, human, system_rates = simulate_systems(labels, rates=rates, n_per_system=n_per_system,
                                                    repetitions=repetitions, seed=seed)
    if isinstance(n_simulations, bool) or not isinstance(n_simulations, (int, np.integer)) or n_simulations < 1:
        raise ValueError(f"n_simulations must be a positive integer, got {n_simulations!r}")
    simulated = {name: [] for name in arrays}
    for k in range(int(n_simulations)):
        sim_systems, sim_human = (systems, human) if k == 0 else simulate_systems(
            labels, rates=rates, n_per_system=n_per_system, repetitions=repetitions, seed=[seed, 3, k])[:2]
        for name, values in arrays.items():
            simulated[name].append(_system_spearman(values, sim_systems, sim_human))
    out: dict = {}
    for name, values in arrays.items():
        means = values[np.asarray(systems)].mean(axis=1)
        rhos = np.asarray(simulated[name])
        out[name] = {"spearman": float(np.nanmean(rhos)) if np.isfinite(rhos).any() else float("nan"),
                     "simulation_sd": float(np.nanstd(rhos)) if np.isfinite(rhos).any() else float("nan"),
                     "spearman_first": float(rhos[0]),
                     "mean_by_rate": {str(c): float(means[system_rates == c].mean()) for c in sorted(set(rates))}}
    if n_bootstrap:
        rng = np.random.default_rng([seed, 1])
        positives, negatives = np.flatnonzero(labels == 1), np.flatnonzero(labels == 0)
        draws = {name: [] for name in arrays}
        for b in range(int(n_bootstrap)):
            sample = np.r_[rng.choice(negatives, negatives.size), rng.choice(positives, positives.size)]
            boot_systems, boot_human, _ = simulate_systems(labels[sample], rates=rates, n_per_system=n_per_system,
                                                           repetitions=repetitions, seed=[seed, 2, b])
            for name, values in arrays.items():
                draws[name].append(_system_spearman(values[sample], boot_systems, boot_human))
        tail = (1 - confidence) / 2 * 100
        for name in arrays:
            finite = np.asarray(draws[name])[np.isfinite(draws[name])]
            low, high = np.percentile(finite, [tail, 100 - tail]) if finite.size else (np.nan, np.nan)
            out[name].update(ci_low=float(low), ci_high=float(high))
    out["_setup"] = {"rates": list(rates), "n_per_system": int(n_per_system), "repetitions": int(repetitions),
                     "num_systems": len(systems), "seed": seed, "n_bootstrap": int(n_bootstrap),
                     "confidence": confidence, "n_simulations": int(n_simulations),
                     "num_consistent": int((labels == 1).sum()),
                     "num_inconsistent": int((labels == 0).sum())}
    return out["score"] | {"_setup": out["_setup"]} if single else out


def three_way_view(scores, classes, split: dict | None = None) -> dict:
    """Everything BEGIN's three-way view reports for one metric.

    ``split`` is how the binary protocol calibrates (as in ``eval/begin.py``): ``{"mode": "cv",
    "folds": [...]}`` (the default: 5 folds stratified by class, seed 0) or ``{"mode": "files",
    "dev": mask, "test": mask}``. Returns per-class ``distributions`` and ``pairwise_auroc`` (all
    rows), the ``three_way`` accuracy with two thresholds fitted on dev (``three_way_macro_f1``:
    fitted for macro-F1 instead), and ``called_faithful``: the share of each class that the binary
    faithful-vs-rest threshold (best dev F1) calls faithful, on the test rows (out of fold in cv).
    """
    scores, classes = _classes(scores, classes)
    if split is None:
        split = {"mode": "cv", "folds": stratified_folds(classes, 5, seed=0)}
    out = {"distributions": class_distributions(scores, classes), "pairwise_auroc": pairwise_auroc(scores, classes)}
    try:
        out.update(_three_way_calibrated(scores, classes, split))
    except ValueError as err:  # a class or the faithful label missing from a calibration fold
        out["error"] = f"three-way calibration impossible on these rows: {err}"
    return out


def _three_way_calibrated(scores, classes, split) -> dict:
    labels = (classes == BEGIN_CLASSES[2]).astype(int)
    out = {}
    if split["mode"] == "cv":
        folds = np.asarray(split["folds"])
        out["three_way"] = three_way_cross_validated(scores, classes, folds)
        out["three_way_macro_f1"] = three_way_cross_validated(scores, classes, folds, objective="macro_f1")
        called = np.zeros(scores.size, dtype=bool)
        for fold in sorted(set(folds.tolist())):
            test = folds == fold
            threshold, _ = best_f1_threshold(scores[~test], labels[~test])
            called[test] = scores[test] >= threshold
        test_mask = np.ones(scores.size, dtype=bool)
    else:
        dev, test_mask = np.asarray(split["dev"], bool), np.asarray(split["test"], bool)
        out["three_way"] = three_way_evaluate(scores[dev], classes[dev], scores[test_mask], classes[test_mask])
        out["three_way_macro_f1"] = three_way_evaluate(scores[dev], classes[dev], scores[test_mask],
                                                       classes[test_mask], objective="macro_f1")
        threshold, _ = best_f1_threshold(scores[dev], labels[dev])
        called = scores >= threshold
    out["called_faithful"] = {name: float(np.mean(called[test_mask & (classes == name)]))
                              for name in BEGIN_CLASSES if (test_mask & (classes == name)).any()}
    return out
