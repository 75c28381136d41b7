"""The BEGIN protocol on hand-made score/label sets, checked by hand and against scikit-learn/scipy."""

import numpy as np
import pytest
from scipy.stats import pearsonr, spearmanr
from sklearn.metrics import accuracy_score, f1_score, precision_score, recall_score, roc_auc_score

from pmi_decode.metrics import meta_eval

SCORES = [0.1, 0.4, 0.35, 0.8]
LABELS = [0, 0, 1, 1]


def test_best_threshold_by_hand():
    # >=0.8: F1 2/3; >=0.4: 1/2; >=0.35: P 2/3, R 1 -> 0.8; >=0.1: 2/3.
    threshold, f1 = meta_eval.best_f1_threshold(SCORES, LABELS)
    assert threshold == 0.35
    assert f1 == pytest.approx(0.8)


def test_best_threshold_matches_brute_force_with_sklearn():
    rng = np.random.default_rng(0)
    for _ in range(20):
        labels = rng.integers(0, 2, 60)
        labels[0] = 1
        scores = np.round(rng.normal(size=60) + labels, 1)  # rounding makes ties
        threshold, f1 = meta_eval.best_f1_threshold(scores, labels)
        brute = max(f1_score(labels, scores >= t) for t in np.unique(scores))
        assert f1 == pytest.approx(brute)
        assert f1_score(labels, scores >= threshold) == pytest.approx(brute)


def test_ties_choose_the_highest_threshold():
    # >=4: P 1, R 1/2 -> 2/3; >=3: 1/2; >=2: 2/5; >=1: P 1/2, R 1 -> 2/3
    assert meta_eval.best_f1_threshold([1.0, 2.0, 3.0, 4.0], [1, 0, 0, 1]) == (4.0, pytest.approx(2 / 3))


def test_equal_scores_are_never_split():
    # a cut between the two 3.0s would give F1 1.0, but no threshold can make it
    assert meta_eval.best_f1_threshold([1.0, 3.0, 3.0], [0, 1, 0]) == (3.0, pytest.approx(2 / 3))


def test_classification_metrics_match_sklearn():
    rng = np.random.default_rng(1)
    labels = rng.integers(0, 2, 50)
    scores = rng.random(50)
    got = meta_eval.classification_metrics(scores, labels, 0.5)
    pred = scores >= 0.5
    assert got["precision"] == pytest.approx(precision_score(labels, pred))
    assert got["recall"] == pytest.approx(recall_score(labels, pred))
    assert got["f1"] == pytest.approx(f1_score(labels, pred))
    assert got["accuracy"] == pytest.approx(accuracy_score(labels, pred))


def test_correlations_by_hand_and_against_scipy():
    got = meta_eval.correlations(SCORES, LABELS)
    assert got["auroc"] == pytest.approx(0.75)  # 3 of the 4 positive/negative pairs are ordered
    assert got["spearman"] == pytest.approx(spearmanr(SCORES, LABELS).statistic)
    assert got["pearson"] == pytest.approx(pearsonr(SCORES, LABELS).statistic)
    assert got["auroc"] == pytest.approx(roc_auc_score(LABELS, SCORES))


def test_minmax_uses_dev_range():
    low, high = meta_eval.minmax_fit([2.0, 4.0, 6.0])
    assert (low, high) == (2.0, 6.0)
    assert meta_eval.minmax_normalize([2.0, 8.0, 0.0], low, high).tolist() == [0.0, 1.5, -0.5]
    assert meta_eval.minmax_normalize([3.0], 1.0, 1.0).tolist() == [0.0]


def test_evaluate_calibrates_on_dev_and_reports_on_test():
    dev_scores, dev_labels = [0.0, 10.0, 6.0, 8.0, 2.0], [0, 1, 1, 1, 0]
    # dev: normalised 0, 1, .6, .8, .2 -> threshold 0.6 gives F1 1.0
    test_scores, test_labels = [7.0, 5.0, 12.0, 6.5], [1, 1, 1, 0]
    result = meta_eval.evaluate(dev_scores, dev_labels, test_scores, test_labels, ["a", "a", "b", "b"])
    assert result["threshold"] == pytest.approx(0.6)
    assert result["dev_f1"] == pytest.approx(1.0)
    # test predictions (>= 6): 1, 0, 1, 1 -> TP 2, FP 1, FN 1
    assert result["precision"] == pytest.approx(2 / 3)
    assert result["recall"] == pytest.approx(2 / 3)
    assert result["accuracy"] == pytest.approx(0.5)
    assert result["f1_per_source"] == {"a": pytest.approx(2 / 3), "b": pytest.approx(2 / 3)}
    assert result["auroc"] == pytest.approx(roc_auc_score(test_labels, test_scores))


def test_cross_validated_thresholds_each_fold_on_the_others():
    scores = np.array([1.0, 2.0, 3.0, 4.0, 1.5, 2.5, 3.5, 4.5])
    labels = np.array([0, 0, 1, 1, 0, 1, 1, 1])
    folds = np.array([0, 0, 0, 0, 1, 1, 1, 1])
    sources = np.array(["x"] * 4 + ["y"] * 4)
    result = meta_eval.cross_validated(scores, labels, sources, folds)
    # fold 1 calibrates on fold 0: threshold at 3.0 -> fold 1 predictions 0,0,1,1 (misses 2.5)
    # fold 0 calibrates on fold 1: threshold at 2.5 -> fold 0 predictions 0,0,1,1 (all right)
    expected = np.array([0, 0, 1, 1, 0, 0, 1, 1])
    assert result["f1"] == pytest.approx(f1_score(labels, expected))
    assert result["accuracy"] == pytest.approx(accuracy_score(labels, expected))
    assert result["f1_per_source"]["x"] == pytest.approx(1.0)
    assert result["f1_per_source"]["y"] == pytest.approx(0.8)
    assert result["auroc"] == pytest.approx(roc_auc_score(labels, scores))


def test_stratified_folds_balance_each_stratum():
    strata = ["a|1"] * 10 + ["a|0"] * 20 + ["b|1"] * 5
    folds = meta_eval.stratified_folds(strata, 5, seed=3)
    for fold in range(5):
        picked = [s for s, f in zip(strata, folds) if f == fold]
        assert picked.count("a|1") == 2 and picked.count("a|0") == 4 and picked.count("b|1") == 1


def test_bad_input():
    with pytest.raises(ValueError, match="NaN"):
        meta_eval.correlations([0.1, float("nan")], [0, 1])
    with pytest.raises(ValueError, match="labels"):
        meta_eval.best_f1_threshold([0.1, 0.2], [0, 1, 1])
    with pytest.raises(ValueError, match="no positive"):
        meta_eval.best_f1_threshold([0.1, 0.2], [0, 0])
    with pytest.raises(ValueError, match="0/1"):
        meta_eval.classification_metrics([0.1, 0.2], [0, 2], 0.5)
    with pytest.raises(ValueError, match="both"):
        meta_eval.correlations([0.1, 0.2], [1, 1])


def _load_begin_script():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "eval" / "begin.py"
    spec = importlib.util.spec_from_file_location("eval_begin", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_begin_harness_caches_rows_and_reports_unavailable_metrics(tmp_path):
    import json
    from pathlib import Path

    import yaml

    from pmi_decode.batch import scoring

    begin = _load_begin_script()
    calls = []

    def counting(documents, histories, responses, **options):
        calls.append(len(responses))
        return [{"length": float(len(r))} for r in responses]

    scoring.register_metric("length_begin_test", counting)
    config = {
        "data_dir": str(Path(__file__).parent / "fixtures" / "begin"),
        "files": ["begin_dev_wow.tsv", "begin_dev_tc.tsv", "begin_dev_cmu.tsv"],
        "split": {"mode": "cv", "folds": 2, "seed": 0},
        "cache_dir": str(tmp_path / "cache"),
        "output_dir": str(tmp_path / "out"),
        "metrics": [
            {"name": "length_begin_test", "columns": {"Length": "length", "Half length": "length / 2"}},
            {"name": "unigram_f1", "columns": {"Unigram F1": "unigram_f1"}},
            {"name": "faithcritic", "options": {"faithcritic_model": str(tmp_path / "no-such-model")},
             "columns": {"FaithCritic": "faithcritic"}},
        ],
    }
    path = tmp_path / "begin.yaml"
    path.write_text(yaml.safe_dump(config))
    try:
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # tiny strata in the fixture
            first = begin.main(["--config", str(path)])
            second = begin.main(["--config", str(path)])
    finally:
        scoring.METRICS.pop("length_begin_test")
    assert calls == [16]  # the rerun read every row from the cache
    assert first["num_rows"] == 16
    assert "error" in first["metrics"]["FaithCritic"]
    length = first["metrics"]["Length"]
    assert length["auroc"] == second["metrics"]["Length"]["auroc"]
    assert first["metrics"]["Half length"]["auroc"] == pytest.approx(length["auroc"])  # same ranking
    assert set(length["f1_per_source"]) == {"cmu", "tc", "wow"}
    saved = json.loads((tmp_path / "out" / "begin_results.json").read_text())
    assert saved["metrics"]["Unigram F1"]["num_rows"] == 16
    table = (tmp_path / "out" / "begin_results.md").read_text()
    assert "| Unigram F1 |" in table and "FaithCritic:" in table


def _fit_script():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "eval" / "studies" / "fit_faith_score.py"
    spec = importlib.util.spec_from_file_location("fit_faith_score", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_rank_auroc_of_the_fit_script_matches_scikit_learn():
    from sklearn.metrics import roc_auc_score

    script = _fit_script()
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 2, 200)
    values = np.round(labels + rng.normal(0, 1, 200), 1)  # rounding makes ties
    assert script._auroc(values, labels) == pytest.approx(roc_auc_score(labels, values))
    low, high = script.bootstrap_auroc_ci(values, labels, n=50)
    assert low < roc_auc_score(labels, values) < high


def test_fitted_coefficients_give_the_same_probabilities_in_the_package():
    from pmi_decode.metrics.faith_score import FaithModel

    script = _fit_script()
    rng = np.random.default_rng(1)
    rows = []
    for _ in range(120):
        label = int(rng.integers(0, 2))
        rows.append({"cpmi_mean": label + rng.normal(), "unigram_f1": 0.3 * label + rng.random(), "fit_label": label})
    spec = script.fit(rows, ("cpmi_mean", "unigram_f1"))
    assert spec["coef"][0] > 0 and spec["coef"][1] > 0  # both features carry the label
    model = FaithModel.load({**spec, "scorer_model": "test"})
    expected = script.predict(spec, rows)
    assert [model.probability(r) for r in rows] == pytest.approx(expected.tolist())
