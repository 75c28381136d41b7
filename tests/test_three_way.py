"""BEGIN's three-way view: per-class distributions, two fitted thresholds, and the generic confusion."""

from __future__ import annotations

import numpy as np
import pytest

from pmi_decode.metrics.meta_eval import (
    BEGIN_CLASSES,
    class_distributions,
    fit_two_thresholds,
    generic_confusion,
    pairwise_auroc,
    stratified_folds,
    three_way_cross_validated,
    three_way_evaluate,
    three_way_metrics,
    three_way_predict,
)

NFA, GEN, FA = BEGIN_CLASSES


def test_separable_classes_get_perfect_thresholds():
    scores = [0.1, 0.2, 0.3, 0.5, 0.55, 0.9, 0.95]
    classes = [NFA, NFA, NFA, GEN, GEN, FA, FA]
    fit = fit_two_thresholds(scores, classes)
    assert fit["order"] == [NFA, GEN, FA] and fit["thresholds"] == [0.5, 0.9] and fit["accuracy"] == 1.0
    assert list(three_way_predict([0.0, 0.6, 1.0], fit["order"], fit["thresholds"])) == [NFA, GEN, FA]


def test_order_is_searched_when_generic_scores_highest():
    # a metric that rewards generic responses: the fitted order puts Generic on top
    scores = [0.1, 0.2, 0.5, 0.6, 0.9, 0.95]
    classes = [NFA, NFA, FA, FA, GEN, GEN]
    fit = fit_two_thresholds(scores, classes)
    assert fit["order"] == [NFA, FA, GEN] and fit["accuracy"] == 1.0
    fixed = fit_two_thresholds(scores, classes, order=BEGIN_CLASSES)
    assert fixed["accuracy"] < 1.0


def test_brute_force_agrees_with_the_vectorised_fit():
    rng = np.random.default_rng(0)
    classes = np.array(BEGIN_CLASSES)[rng.integers(0, 3, 60)]
    scores = rng.integers(0, 12, 60).astype(float)   # ties on purpose
    fit = fit_two_thresholds(scores, classes, order=BEGIN_CLASSES)
    cuts = list(np.unique(scores)) + [np.inf]
    best = max(np.mean(three_way_predict(scores, BEGIN_CLASSES, (a, b)) == classes) for a in cuts for b in cuts if a <= b)
    assert fit["accuracy"] == pytest.approx(best)
    macro = fit_two_thresholds(scores, classes, order=BEGIN_CLASSES, objective="macro_f1")
    best_f1 = max(three_way_metrics(three_way_predict(scores, BEGIN_CLASSES, (a, b)), classes)["macro_f1"]
                  for a in cuts for b in cuts if a <= b)
    assert macro["macro_f1"] == pytest.approx(best_f1)


def test_metrics_confusion_and_distributions():
    predicted, truth = [NFA, GEN, FA, FA], [NFA, FA, FA, GEN]
    m = three_way_metrics(predicted, truth)
    assert m["accuracy"] == 0.5 and m["confusion"][FA] == {NFA: 0, GEN: 1, FA: 1}
    assert m["f1_per_class"][NFA] == 1.0 and m["f1_per_class"][GEN] == 0.0 and m["f1_per_class"][FA] == 0.5
    dist = class_distributions([1, 2, 3, 10], [NFA, NFA, GEN, FA])
    assert list(dist) == [NFA, GEN, FA] and dist[NFA]["mean"] == 1.5 and dist[FA]["n"] == 1
    auroc = pairwise_auroc([0, 1, 2, 3], [NFA, GEN, GEN, FA])
    assert auroc[f"{FA} vs {GEN}"] == 1.0 and auroc[f"{GEN} vs {NFA}"] == 1.0
    share = generic_confusion([0.2, 0.8, 0.9, 0.7], [NFA, GEN, FA, GEN], 0.75)
    assert share == {NFA: 0.0, GEN: 0.5, FA: 1.0}


def test_dev_to_test_and_cross_validated():
    rng = np.random.default_rng(1)
    classes = np.array(BEGIN_CLASSES)[rng.integers(0, 3, 300)]
    scores = np.array([BEGIN_CLASSES.index(c) for c in classes]) + rng.normal(0, 0.4, 300)
    res = three_way_evaluate(scores[:150], classes[:150], scores[150:], classes[150:])
    assert res["order"] == list(BEGIN_CLASSES) and res["accuracy"] > 0.7 and res["dev_accuracy"] > 0.7
    folds = stratified_folds(classes, 5, seed=0)
    cv = three_way_cross_validated(scores, classes, folds)
    assert cv["accuracy"] > 0.7 and len(cv["folds"]) == 5
    assert sum(sum(row.values()) for row in cv["confusion"].values()) == 300


def test_bad_input():
    with pytest.raises(ValueError, match="three classes"):
        fit_two_thresholds([0.1, 0.2], [NFA, FA])
    with pytest.raises(ValueError, match="objective"):
        fit_two_thresholds([0.1, 0.2, 0.3], [NFA, GEN, FA], objective="f2")
    with pytest.raises(ValueError, match="got 2 scores but 3 class labels"):
        class_distributions([0.1, 0.2], [NFA, GEN, FA])


def test_begin_harness_reports_three_way_and_the_nli_slot(tmp_path):
    """eval/begin.py: the three-way view for every metric, the NLI metric from a local model
    folder, and the NLI slot reported as unavailable when its model cannot load."""
    import importlib.util
    import warnings
    from pathlib import Path

    import torch
    import yaml
    from transformers import RobertaConfig, RobertaForSequenceClassification

    from test_q2 import wordpiece_tokenizer

    torch.manual_seed(0)
    tok = wordpiece_tokenizer(model_input_names=["input_ids", "attention_mask"])
    model = RobertaForSequenceClassification(RobertaConfig(
        vocab_size=len(tok), hidden_size=32, num_hidden_layers=1, num_attention_heads=4, intermediate_size=64,
        max_position_embeddings=520, pad_token_id=0, num_labels=3, type_vocab_size=1,
        id2label={0: "contradiction", 1: "neutral", 2: "entailment"},
        label2id={"contradiction": 0, "neutral": 1, "entailment": 2}))
    model.save_pretrained(tmp_path / "nli")
    tok.save_pretrained(tmp_path / "nli")

    root = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location("eval_begin_three_way", root / "eval" / "begin.py")
    begin = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(begin)
    config = {
        "data_dir": str(root / "tests" / "fixtures" / "begin"),
        "files": ["begin_dev_wow.tsv", "begin_dev_tc.tsv", "begin_dev_cmu.tsv"],
        "split": {"mode": "cv", "folds": 2, "seed": 0},
        "cache_dir": str(tmp_path / "cache"), "output_dir": str(tmp_path / "out"),
        "metrics": [
            {"name": "unigram_f1", "columns": {"Unigram F1": "unigram_f1"}},
            {"name": "nli", "options": {"nli_model": str(tmp_path / "nli"), "device": "cpu"},
             "columns": {"NLI (tiny)": "nli_entailment"}},
            {"name": "nli", "options": {"nli_model": str(tmp_path / "no-nli-here")},
             "columns": {"NLI (missing)": "nli_entailment"}},
        ],
    }
    path = tmp_path / "begin.yaml"
    path.write_text(yaml.safe_dump(config))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = begin.main(["--config", str(path)])
    assert "no-nli-here" in report["metrics"]["NLI (missing)"]["error"]
    assert 0.0 <= report["metrics"]["NLI (tiny)"]["auroc"] <= 1.0
    view = report["three_way"]["Unigram F1"]
    assert {c: d["n"] for c, d in view["distributions"].items()} == {NFA: 6, GEN: 4, FA: 6}
    assert set(view) >= {"pairwise_auroc", "distributions"}
    if "error" not in view:  # 2 folds of 16 rows can leave a class out of a calibration fold
        assert sum(sum(r.values()) for r in view["three_way"]["confusion"].values()) == 16
    assert set(report["three_way"]) == {"Unigram F1", "NLI (tiny)"}
