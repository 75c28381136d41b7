"""eval/studies/meta_eval_report.py on the BEGIN fixtures: three-way and system-level reports, external scores."""

from __future__ import annotations

import importlib.util
import json
import warnings
from pathlib import Path

import numpy as np
import pytest

from pmi_decode.experiments.faith_rows import texts_key

ROOT = Path(__file__).resolve().parents[1]


def load_script():
    spec = importlib.util.spec_from_file_location("meta_eval_report", ROOT / "eval" / "studies" / "meta_eval_report.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_reports_with_external_scores_and_an_unavailable_nli(tmp_path):
    report_script = load_script()
    from pmi_decode.data.begin import read_begin

    rows = [r for f in sorted((ROOT / "tests/fixtures/begin").glob("*.tsv")) for r in read_begin(f)]
    # an oracle metric in the BEGIN harness cache format, and one in the row format, covering all rows
    cache = tmp_path / "oracle.jsonl"
    cache.write_text("".join(json.dumps({"key": texts_key(r.knowledge, r.message, r.response),
                                         "scores": {"oracle": float(r.faithful), "num_tokens": 3}}) + "\n"
                             for r in rows))
    by_text = tmp_path / "length.jsonl"
    by_text.write_text("".join(json.dumps({"knowledge": r.knowledge, "history": [r.message], "response": r.response,
                                           "length": len(r.response)}) + "\n" for r in rows))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = report_script.main([
            "--begin-dir", str(ROOT / "tests/fixtures/begin"), "--audit-dir", "", "--scores", str(cache),
            "--scores", f"{by_text}:length", "--nli", str(tmp_path / "no-nli"), "--output-dir", str(tmp_path / "out"),
            "--n-per-system", "6", "--repetitions", "3", "--n-bootstrap", "20", "--folds", "2"])
    three_way, system = out["three_way"], out["system_level"]
    assert set(three_way["metrics"]) == {"Unigram F1", "BLEU", "ROUGE-L", "oracle:oracle", "length:length"}
    assert "no-nli" in three_way["unavailable"]["NLI (entailment)"]
    oracle = three_way["metrics"]["oracle:oracle"]
    assert oracle["pairwise_auroc"]["Fully attributable vs Generic"] == 1.0
    assert oracle["called_faithful"]["Fully attributable"] == 1.0 and oracle["called_faithful"]["Generic"] == 0.0
    begin = system["data_sets"]["BEGIN dev"]
    assert begin["metrics"]["oracle:oracle"]["spearman"] == pytest.approx(1.0)
    assert begin["setup"]["num_consistent"] == 6 and begin["num_rows"] == 16
    saved = json.loads((tmp_path / "out" / "system_level.json").read_text())
    assert saved["data_sets"]["BEGIN dev"]["metrics"]["oracle:oracle"]["ci_low"] == pytest.approx(1.0)
    assert "| oracle:oracle |" in (tmp_path / "out" / "begin_three_way.md").read_text()
    assert "| oracle:oracle | 1.000 |" in (tmp_path / "out" / "system_level.md").read_text()


def test_external_scores_leave_unscored_rows_out(tmp_path):
    report_script = load_script()
    data = {"keys": ["a", "b", "c"]}
    path = tmp_path / "part.jsonl"
    path.write_text(json.dumps({"key": "a", "scores": {"m": 1.0}}) + "\n" + "not json\n")
    values = report_script.external_scores(str(path), data)["part:m"]
    assert values[0] == 1.0 and np.isnan(values[1:]).all()


def test_token_cache_lines_become_pmi_faith_columns(tmp_path):
    report_script = load_script()
    path = tmp_path / "tokens.jsonl"
    path.write_text(json.dumps({"key": "a", "include_eos": True, "token_cpmi": [1.0, 2.0, 6.0],
                                "token_upmi": [0.0, 1.0, 2.0], "tokens": ["x", "y", "</s>"]}) + "\n")
    columns = report_script.external_scores(str(path), {"keys": ["a", "b"]})
    assert columns["tokens:cpmi_mean"][0] == 3.0 and columns["tokens:cpmi_sum"][0] == 9.0
    named = report_script.external_scores(f"{path}:cpmi_mean=PMI-Faith (mean)", {"keys": ["a"]})
    assert list(named) == ["PMI-Faith (mean)"] and named["PMI-Faith (mean)"][0] == 3.0
    assert columns["tokens:cpmi_mean_no_eos"][0] == 1.5 and columns["tokens:upmi_mean"][0] == 1.0
    assert np.isnan(columns["tokens:cpmi_mean"][1])
