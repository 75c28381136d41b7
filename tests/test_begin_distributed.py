"""eval/begin.py over several processes: the cache and the report equal a one-process run's, a
killed run resumes without losing, duplicating or rescoring rows, and shard files written with
other settings are refused.

PMI-Faith on a tiny random model is the metric under test because its scores depend on the rest
of their call (padding, shared prompts): scoring the 16 fixture rows in chunks of 3 instead of 16
changes 8 of them in the last bits (checked below), so equality here means every row was scored
with the companions a one-process run gives it. The in-process tests play the processes one after
another (``Processes(index, count)`` without a process group); the last test starts two real gloo
processes with ``accelerate launch``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
import yaml
from tiny_models import saved_tiny_model

from pmi_decode.batch import distributed, scoring
from pmi_decode.batch.distributed import Processes, ShardError, shard_dir, shard_path

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "begin"
PMI = {"compute": ["cpmi", "upmi"], "include_eos": True, "chat_template": False, "batch_size": 2}


def _load_begin():
    spec = importlib.util.spec_from_file_location("eval_begin_distributed", ROOT / "eval" / "begin.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


begin = _load_begin()


@pytest.fixture(scope="module")
def scorer_dir(tmp_path_factory):
    return saved_tiny_model(tmp_path_factory.mktemp("models") / "tiny-llama")


@pytest.fixture
def one_thread():
    """Every run here scores with one torch thread (``torch_threads: 1``), as a launched process
    does; the test process gets its setting back afterwards."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def spy():
    """A metric ``pmi_faith_spy``: PMI-Faith, recording the responses of every call."""
    calls = []

    def metric(documents, histories, responses, **options):
        calls.append(list(responses))
        return scoring.get_metric("pmi_faith")(documents, histories, responses, **options)

    scoring.register_metric("pmi_faith_spy", metric)
    yield calls
    scoring.METRICS.pop("pmi_faith_spy")


def _config(root: Path, scorer: str, *, chunk_size=3, metric="pmi_faith", extra=()) -> Path:
    config = {
        "data_dir": str(FIXTURES),
        "files": ["begin_dev_wow.tsv", "begin_dev_tc.tsv", "begin_dev_cmu.tsv"],
        "split": {"mode": "cv", "folds": 2, "seed": 0},
        "scorer_model": scorer,
        "cache_dir": str(root / "cache"),
        "output_dir": str(root / "out"),
        "chunk_size": chunk_size,
        "torch_threads": 1,
        "metrics": [
            {"name": metric, "options": PMI, "columns": {"CPMI (mean)": "cpmi_mean", "UPMI (sum)": "upmi_sum"}},
            {"name": "unigram_f1", "columns": {"Unigram F1": "unigram_f1"}},
            *extra,
        ],
    }
    root.mkdir(parents=True, exist_ok=True)
    path = root / "begin.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _run(config: Path, monkeypatch, processes: Processes | None = None):
    monkeypatch.setattr(distributed, "process_group", lambda: processes or Processes())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tiny strata in the fixture
        return begin.main(["--config", str(config)])


def _sharded(config: Path, monkeypatch, count: int):
    """``count`` processes one after another, the main one last (it merges and reports)."""
    for index in reversed(range(count)):
        report = _run(config, monkeypatch, Processes(index, count))
        assert (report is None) == (index != 0)
    return report


def _caches(root: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted((root / "cache").glob("*.jsonl"))}


def _results(report: dict) -> dict:
    return {k: v for k, v in report.items() if k != "config"}


def _pmi_cache(root: Path) -> Path:
    (path,) = [p for p in (root / "cache").glob("pmi_faith*.jsonl")]
    return path


@pytest.fixture
def reference(tmp_path_factory, scorer_dir, monkeypatch, one_thread):
    root = tmp_path_factory.mktemp("one-process")
    report = _run(_config(root, scorer_dir), monkeypatch)
    return root, report


# ---------------------------------------------------------------------------- identical results
def test_chunking_changes_pmi_faith_scores_so_equality_below_is_a_real_check(tmp_path, scorer_dir, monkeypatch,
                                                                             one_thread, reference):
    root, _ = reference
    _run(_config(tmp_path, scorer_dir, chunk_size=16), monkeypatch)
    by_chunk_of_3 = {r["key"]: r["scores"] for r in map(json.loads, _pmi_cache(root).open())}
    by_chunk_of_16 = {r["key"]: r["scores"] for r in map(json.loads, _pmi_cache(tmp_path).open())}
    assert by_chunk_of_3.keys() == by_chunk_of_16.keys() and len(by_chunk_of_3) == 16
    assert sum(by_chunk_of_3[k] != by_chunk_of_16[k] for k in by_chunk_of_3) > 0


@pytest.mark.parametrize("count", [2, 3])
def test_sharded_cache_and_report_equal_one_process(tmp_path, scorer_dir, monkeypatch, one_thread, reference, count):
    root, single = reference
    report = _sharded(_config(tmp_path, scorer_dir), monkeypatch, count)
    assert _caches(tmp_path) == _caches(root)  # byte for byte, rows in the same order
    assert _results(report) == _results(single)
    assert json.loads((tmp_path / "out" / "begin_results.json").read_text())["metrics"] == \
        json.loads((root / "out" / "begin_results.json").read_text())["metrics"]
    assert not list((tmp_path / "cache").glob("*.shards"))


def test_each_process_scores_only_its_chunks(tmp_path, scorer_dir, monkeypatch, one_thread, spy):
    config = _config(tmp_path, scorer_dir, metric="pmi_faith_spy")
    _run(config, monkeypatch, Processes(1, 2))
    assert [len(c) for c in spy] == [3, 3, 1]  # chunks 1, 3, 5 of 3, 3, 3, 3, 3, 1 rows
    assert not (tmp_path / "out").exists()  # only the main process reports
    _run(config, monkeypatch, Processes(0, 2))
    assert [len(c) for c in spy] == [3, 3, 1, 3, 3, 3]
    assert len({r for c in spy for r in c}) == 16


# ---------------------------------------------------------------------------- resuming
def test_a_killed_run_resumes_without_losing_duplicating_or_rescoring(tmp_path, scorer_dir, monkeypatch, one_thread,
                                                                      reference, spy):
    root, single = reference
    expected = [json.loads(line) for line in _pmi_cache(root).open()]  # one-process order: chunk k = rows 3k..3k+2
    config = _config(tmp_path, scorer_dir, metric="pmi_faith_spy")
    settings = begin.shard_settings(yaml.safe_load(config.read_text())["metrics"][0], scorer_dir, 3)
    cache_path = tmp_path / "cache" / f"{begin.metric_id({'name': 'pmi_faith_spy', 'options': PMI}, scorer_dir)}.jsonl"

    # Two processes killed: process 0 had written its chunk 0 whole, one row of its chunk 2 and half
    # of the next line; process 1 nothing. (The spy metric has its own cache name; its scores are
    # PMI-Faith's, so the one-process PMI-Faith cache is the expectation.)
    def line(row):
        return json.dumps({"id": row["key"], "settings": settings, "scores": row["scores"]}) + "\n"

    part = shard_path(cache_path, 0, 2)
    part.parent.mkdir(parents=True)
    part.write_text("".join(line(r) for r in expected[0:3]) + line(expected[6]) + line(expected[7])[:50])

    _sharded(config, monkeypatch, 3)  # resumed with three processes: shard files of any count are read
    rescored = [r for c in spy for r in c]
    assert len(rescored) == 13  # chunk 0 was not scored again; the partly written chunk 2 was, whole
    assert sorted(len(c) for c in spy) == [1, 3, 3, 3, 3]
    got = [json.loads(line) for line in cache_path.open()]
    assert got == expected  # same rows, same scores, same order, no duplicates
    assert not shard_dir(cache_path).exists()
    spy.clear()
    again = _run(config, monkeypatch)
    assert spy == [] and _results(again)["metrics"]["Unigram F1"] == single["metrics"]["Unigram F1"]


def test_one_process_finishes_a_killed_multi_process_run(tmp_path, scorer_dir, monkeypatch, one_thread, reference):
    root, single = reference
    config = _config(tmp_path, scorer_dir)
    _run(config, monkeypatch, Processes(1, 2))  # process 0 was killed before it wrote anything
    assert len(list((tmp_path / "cache").glob("*.shards/part-00001-of-00002.jsonl"))) == 2
    report = _run(config, monkeypatch)  # no launcher: takes the shard files and finishes the plan
    assert _caches(tmp_path) == _caches(root)
    assert _results(report) == _results(single)


def test_a_merge_with_rows_missing_is_refused_and_the_rerun_completes(tmp_path, scorer_dir, monkeypatch, one_thread,
                                                                      reference):
    root, _ = reference
    config = _config(tmp_path, scorer_dir)
    with pytest.raises(ShardError, match=r"rows are in no shard file .* rerun the same command"):
        _run(config, monkeypatch, Processes(0, 2))  # process 1 never ran
    assert not list((tmp_path / "cache").glob("pmi_faith*.jsonl"))  # nothing half-merged
    _sharded(config, monkeypatch, 2)
    assert _caches(tmp_path) == _caches(root)


def test_a_kill_during_the_merge_leaves_neither_holes_nor_duplicates(tmp_path, scorer_dir, monkeypatch, one_thread,
                                                                     reference):
    root, _ = reference
    config = _config(tmp_path, scorer_dir)
    _sharded(config, monkeypatch, 2)
    cache_path = _pmi_cache(tmp_path)
    rows = cache_path.read_text().splitlines(keepends=True)
    settings = begin.shard_settings(yaml.safe_load(config.read_text())["metrics"][0], scorer_dir, 3)
    # The merge was killed after appending 5 rows and half of the 6th; every shard file was still there.
    part = shard_path(cache_path, 0, 1)
    part.parent.mkdir()
    part.write_text("".join(json.dumps({"id": json.loads(r)["key"], "settings": settings,
                                        "scores": json.loads(r)["scores"]}) + "\n" for r in rows))
    cache_path.write_text("".join(rows[:5]) + rows[5][:30])
    _run(config, monkeypatch, Processes(0, 1))
    assert _caches(tmp_path) == _caches(root)


# ---------------------------------------------------------------------------- refusals and failures
def test_shards_of_other_settings_are_refused(tmp_path, scorer_dir, monkeypatch, one_thread):
    _run(_config(tmp_path, scorer_dir), monkeypatch, Processes(1, 2))
    with pytest.raises(ShardError, match=r"other settings \(chunk_size: 3 in the file, 4 now\).*delete"):
        _sharded(_config(tmp_path, scorer_dir, chunk_size=4), monkeypatch, 2)
    other_batch = dict(PMI, batch_size=4)  # same cache file (batch size changes rounding only), other shards
    config = _config(tmp_path, scorer_dir)
    data = yaml.safe_load(config.read_text())
    data["metrics"][0]["options"] = other_batch
    config.write_text(yaml.safe_dump(data))
    with pytest.raises(ShardError, match=r"other settings \(batch_size: 2 in the file, 4 now\)"):
        _run(config, monkeypatch)


def test_a_metric_that_cannot_load_is_unavailable_on_every_process(tmp_path, scorer_dir, monkeypatch, one_thread):
    missing = {"name": "faithcritic", "options": {"faithcritic_model": str(tmp_path / "no-such-model")},
               "columns": {"FaithCritic": "faithcritic"}}
    report = _sharded(_config(tmp_path, scorer_dir, extra=[missing]), monkeypatch, 2)
    assert "no-such-model" in report["metrics"]["FaithCritic"]["error"]
    assert report["metrics"]["Unigram F1"]["num_rows"] == 16


# ---------------------------------------------------------------------------- real processes
def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_accelerate_launch_two_processes_writes_the_one_process_cache_and_report(tmp_path, scorer_dir, reference):
    root, single = reference
    # A metric whose model is missing: every process must agree it is unavailable (a real gather).
    missing = {"name": "faithcritic", "options": {"faithcritic_model": str(tmp_path / "no-such-model")},
               "columns": {"FaithCritic": "faithcritic"}}
    config = _config(tmp_path, scorer_dir, extra=[missing])
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
           "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
           "--main_process_port", str(_free_port()), str(ROOT / "eval" / "begin.py"), "--config", str(config)]
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="",
               HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    run = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "process 1 of 2 scores 3 of 6 chunks" in run.stderr
    assert "merged 16 rows from 2 processes" in run.stderr
    assert _caches(tmp_path) == _caches(root)
    saved = json.loads((tmp_path / "out" / "begin_results.json").read_text())
    assert "no-such-model" in saved["metrics"].pop("FaithCritic")["error"]
    assert saved["metrics"] == json.loads((root / "out" / "begin_results.json").read_text())["metrics"]
    assert saved["num_rows_evaluated"] == single["num_rows_evaluated"] == 16
