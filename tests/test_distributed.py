"""Sharded runs: the merged output of N processes equals a one-process run record for record, and a
killed run resumes without losing or duplicating records.

The in-process tests play the processes one after another (``Processes(index, count)`` without a
process group: its barrier is a no-op); the launcher test starts two real processes with
``accelerate launch`` on the gloo CPU backend.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from tiny_models import DIALOGUES, saved_tiny_model, tiny_model, tiny_tokenizer

from pmi_decode.batch import distributed
from pmi_decode.cli import main
from pmi_decode.batch.decode import decode_records, decode_settings
from pmi_decode.batch.distributed import (
    Processes,
    decode_sharded,
    ShardError,
    read_shard_records,
    run_sharded,
    shard_dir,
    shard_path,
    shard_units,
)

ROOT = Path(__file__).resolve().parents[1]
DECODE = dict(alpha=0.5, p=0.9, num_beams=2, max_new_tokens=5, batch_size=3, seed=0)


def _records(n=10):
    """Dialogues of many different lengths, so the length-sorted batches mix sources."""
    out = []
    for i in range(n):
        doc, hist = DIALOGUES[i % len(DIALOGUES)]
        out.append({"id": f"d{i}", "document": doc + " It is nice." * (i % 4), "history": hist[: 1 + i % len(hist)]})
    return out


@pytest.fixture(scope="module")
def tiny():
    return tiny_model("llama", dtype=torch.float32), tiny_tokenizer("llama")


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory):
    return saved_tiny_model(tmp_path_factory.mktemp("models") / "tiny-llama")


def _read(path):
    return [json.loads(line) for line in open(path) if line.strip()]


def _settings(**kw):
    opts = dict(DECODE, **kw)
    return decode_settings(alpha=opts["alpha"], p=opts["p"], num_beams=opts["num_beams"],
                           do_sample=opts.get("do_sample", False), max_new_tokens=opts["max_new_tokens"],
                           seed=opts["seed"], compare=True, batch_size=opts.get("batch_size"),
                           max_length=opts.get("max_length"), max_history_turns=opts.get("max_history_turns"),
                           chat_template=opts.get("chat_template"))


def _sharded(records, output, model, tokenizer, count, **kw):
    """Run ``count`` simulated processes one after another (the main one last, as it merges)."""
    for index in reversed(range(count)):
        decode_sharded(records, output, lambda: (model, tokenizer), settings=_settings(**kw),
                       processes=Processes(index, count), compare=True, progress=False, **dict(DECODE, **kw))


# ---------------------------------------------------------------------------- units and files
def test_shard_units_deal_round_robin_and_cover_everything_once():
    units = list(range(11))
    shares = [shard_units(units, i, 3) for i in range(3)]
    assert shares == [[0, 3, 6, 9], [1, 4, 7, 10], [2, 5, 8]]
    assert sorted(sum(shares, [])) == units
    with pytest.raises(ValueError, match="process index"):
        shard_units(units, 3, 3)


def test_reading_a_shard_ignores_a_cut_off_last_line_but_not_a_bad_middle_line(tmp_path):
    path = tmp_path / "part.jsonl"
    path.write_text('{"id": "a"}\n{"id": "b"}\n{"id": "c", "pmi_res')
    assert [r["id"] for r in read_shard_records(path)] == ["a", "b"]
    assert path.read_text().endswith('"pmi_res')  # reading never changes another process's file
    path.write_text('{"id": "a"}\nnot json\n{"id": "c"}\n')
    with pytest.raises(ShardError, match=r"part.jsonl:2: not valid JSON"):
        read_shard_records(path)
    path.write_text('{"id": "a", "settings": {"alpha": 0.1}}\n')
    with pytest.raises(ShardError, match="other settings"):
        read_shard_records(path, {"alpha": 0.5})


def test_merge_refuses_when_a_process_left_records_out(tmp_path):
    def compute(index, count, done):
        return iter([{"id": "a"}]) if index == 0 else iter([])

    with pytest.raises(ShardError, match="1 of 2 records are in no shard file"):
        run_sharded(["a", "b"], tmp_path / "out.jsonl", compute, processes=Processes(0, 1))
    assert not (tmp_path / "out.jsonl").exists()
    assert [r["id"] for r in read_shard_records(shard_path(tmp_path / "out.jsonl", 0, 1))] == ["a"]


# ---------------------------------------------------------------------------- identical output
@pytest.mark.parametrize("count", [2, 3])
@pytest.mark.parametrize("do_sample", [False, True])
def test_sharded_output_equals_one_process_record_for_record(tmp_path, tiny, count, do_sample):
    model, tokenizer = tiny
    records = _records()
    single = list(decode_records(records, model, tokenizer, compare=True, progress=False, do_sample=do_sample,
                                 **DECODE))
    out = tmp_path / "out.jsonl"
    _sharded(records, out, model, tokenizer, count, do_sample=do_sample)
    merged = _read(out)
    assert [r["id"] for r in merged] == [r["id"] for r in records]  # input order
    assert merged == sorted(single, key=lambda r: int(r["id"][1:]))
    assert not shard_dir(out).exists()


def test_a_killed_run_resumes_without_losing_or_duplicating_records(tmp_path, tiny):
    model, tokenizer = tiny
    records = _records()
    reference = tmp_path / "reference.jsonl"
    _sharded(records, reference, model, tokenizer, 2)
    expected = _read(reference)

    # A two-process run killed mid-way: process 0 wrote 2 records and half of a third; process 1
    # wrote nothing. Both shards' records are taken from the full run, in the order they were written.
    out = tmp_path / "out.jsonl"
    shard_path(out, 0, 2).parent.mkdir(parents=True)
    by_id = {r["id"]: r for r in expected}
    share0 = [by_id[r["id"]] for r in decode_records(records, model, tokenizer, compare=True, progress=False,
                                                     shard=(0, 2), **DECODE)]
    half = json.dumps(share0[2])[:40]
    shard_path(out, 0, 2).write_text("".join(json.dumps(r) + "\n" for r in share0[:2]) + half)

    computed = []

    def compute(index, n, done):
        for rec in decode_records(records, model, tokenizer, compare=True, progress=False, skip_ids=done,
                                  shard=(index, n), **DECODE):
            computed.append(rec["id"])
            yield rec

    # resumed with three processes this time: shard files of any count are read
    for index in (2, 1, 0):
        run_sharded([r["id"] for r in records], out, compute, settings=_settings(), processes=Processes(index, 3))
    assert _read(out) == expected
    assert len(computed) == len(records) - 2  # the two complete records were not decoded again
    assert not set(computed) & {r["id"] for r in share0[:2]}


def test_resuming_with_other_settings_is_refused(tmp_path, tiny):
    model, tokenizer = tiny
    records = _records(4)
    out = tmp_path / "out.jsonl"
    _sharded(records, out, model, tokenizer, 2)
    with pytest.raises(ShardError, match="other settings"):
        _sharded(records, out, model, tokenizer, 2, alpha=0.25)


# ---------------------------------------------------------------------------- score
def _scored_records(n=7):
    return [dict(r, pmi_response=f"answer {i} about {r['document'].split()[1]}", plain_response="I do not know.")
            for i, r in enumerate(_records(n))]


def test_sharded_score_equals_one_process_and_resumes(tmp_path, monkeypatch):
    inp = tmp_path / "generated.jsonl"
    inp.write_text("".join(json.dumps(r) + "\n" for r in _scored_records()))
    flags = ["score", "--input", str(inp), "--metrics", "knowledge_f1,gold_rouge_l"]
    assert main([*flags, "--output", str(tmp_path / "single.jsonl")]) == 0
    single = _read(tmp_path / "single.jsonl")

    out = tmp_path / "sharded.jsonl"
    for index in (1, 0):
        monkeypatch.setattr(distributed, "process_group", lambda index=index: Processes(index, 2))
        assert main([*flags, "--output", str(out)]) == 0
    assert _read(out) == single
    assert not list(tmp_path.glob("*.shards"))

    # process 1 was killed before it wrote anything: the merge refuses; the rerun scores only its share
    scored_ids = []
    real = distributed.run_sharded

    def spy(ids, output, compute, **kw):
        def counted(index, count, done):
            for rec in compute(index, count, done):
                scored_ids.append(rec["id"])
                yield rec
        return real(ids, output, counted, **kw)

    monkeypatch.setattr(distributed, "run_sharded", spy)
    monkeypatch.setattr(distributed, "process_group", lambda: Processes(0, 2))
    first = tmp_path / "first.jsonl"
    assert main([*flags, "--output", str(first)]) != 0  # process 1 never ran: the merge refuses, naming why
    part = next(tmp_path.glob("first.jsonl.*.shards")) / "part-00000-of-00002.jsonl"
    assert len(_read(part)) == 4
    scored_ids.clear()
    monkeypatch.setattr(distributed, "process_group", lambda: Processes(1, 2))
    main([*flags, "--output", str(first)])
    monkeypatch.setattr(distributed, "process_group", lambda: Processes(0, 2))
    assert main([*flags, "--output", str(first)]) == 0
    assert _read(first) == single
    assert sorted(scored_ids) == sorted(r["id"] for r in single[1::2])  # process 0's share was not redone


# ---------------------------------------------------------------------------- real processes
def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _launch(args, processes):
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", str(processes),
           "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
           "--main_process_port", str(_free_port()), "-m", "pmi_decode.cli", *args]
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="",
               HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.real_defaults  # the launched processes run the shipped defaults; so must the in-process run
def test_accelerate_launch_two_processes_matches_one_process_and_resumes(tmp_path, llama_dir):
    records = _records()
    inp = tmp_path / "in.jsonl"
    inp.write_text("".join(json.dumps(r) + "\n" for r in records))
    flags = ["--model", llama_dir, "--input", str(inp), "--max-new-tokens", "5", "--num-beams", "2",
             "--batch-size", "3", "--compare", "--quiet"]
    single = tmp_path / "single.jsonl"
    assert main(["generate", *flags, "--output", str(single)]) == 0

    out = tmp_path / "two.jsonl"
    loud = [f for f in flags if f != "--quiet"]  # --quiet would hide the summary line checked below
    run = _launch(["generate", *loud, "--output", str(out)], 2)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "from 2 processes" in run.stderr
    merged = _read(out)
    assert [r["id"] for r in merged] == [r["id"] for r in records]
    assert merged == sorted(_read(single), key=lambda r: int(r["id"][1:]))

    # kill simulation: keep the first three records as shard 1's only (complete) output, rerun
    resumed = tmp_path / "resumed.jsonl"
    shard_path(resumed, 1, 2).parent.mkdir(parents=True)
    shard_path(resumed, 1, 2).write_text("".join(json.dumps(r) + "\n" for r in merged[:3]))
    run = _launch(["generate", *flags, "--output", str(resumed)], 2)
    assert run.returncode == 0, run.stderr[-3000:]
    assert _read(resumed) == merged


# ---------------------------------------------------------------------------- sweep
def test_sharded_sweep_writes_the_same_cell_files_as_one_process(tmp_path, tiny):
    from pmi_decode.experiments.sweep import SweepConfig, cell_paths, run_sweep

    records = _records(5)
    base = dict(dataset="tiny", split="dev", methods=["beam_search", "beam_sampling"], alphas=[0, 1], ps=[0.5, 1],
                num_beams=2, max_new_tokens=4, batch_size=2, seed=3, scorer_model=None)
    single = SweepConfig(output_dir=str(tmp_path / "single"), **base)
    run_sweep(single, stages=["generate"], generator=tiny, records=records, progress=False)
    sharded = SweepConfig(output_dir=str(tmp_path / "sharded"), **base)
    written = []
    for index in (1, 0):
        run_sweep(sharded, stages=["generate"], generator=tiny, records=records, progress=False,
                  processes=Processes(index, 2))
        written.append(sorted(p.name for p in (tmp_path / "sharded").rglob("*.jsonl")))
    assert 0 < len(written[0]) < len(single.cells) and len(written[1]) == len(single.cells)  # each did its share
    for cell in single.cells:
        assert cell_paths(single.output_dir, cell)["generations"].read_text() == \
            cell_paths(sharded.output_dir, cell)["generations"].read_text()


def test_one_process_finishes_a_killed_multi_process_run(tmp_path, llama_dir):
    records = _records(6)
    inp = tmp_path / "in.jsonl"
    inp.write_text("".join(json.dumps(r) + "\n" for r in records))
    flags = ["generate", "--model", llama_dir, "--input", str(inp), "--max-new-tokens", "4", "--num-beams", "2",
             "--batch-size", "2", "--quiet"]
    assert main([*flags, "--output", str(tmp_path / "single.jsonl")]) == 0
    single = sorted(_read(tmp_path / "single.jsonl"), key=lambda r: int(r["id"][1:]))
    out = tmp_path / "out.jsonl"
    shard_path(out, 1, 2).parent.mkdir(parents=True)
    shard_path(out, 1, 2).write_text(json.dumps(single[4]) + "\n" + json.dumps(single[1])[:30])
    assert main([*flags, "--output", str(out)]) == 0
    assert _read(out) == single
    assert not shard_dir(out).exists()


def test_settings_difference_names_only_the_differing_keys():
    from pmi_decode.batch.distributed import settings_difference

    old = {"model": "m", "alpha": 0.25, "seed": 0, "format": {"a": 1}}
    new = {"model": "m", "alpha": 0.5, "seed": 0, "format": {"a": 2}, "compare": True}
    assert settings_difference(old, new) == ('alpha: 0.25 in the file, 0.5 now; format: {"a": 1} in the file, '
                                             '{"a": 2} now; compare: absent in the file, true now')


def test_a_sharded_resume_refuses_an_input_whose_dialogues_changed(tmp_path, tiny):
    """As one process does: records already decoded (in the output or a shard file) must come
    from the same document and history as the input's record of their id."""
    from pmi_decode.batch.decode import DialogueFileError

    model, tokenizer = tiny
    records = _records(4)
    out = tmp_path / "out.jsonl"
    shard_path(out, 0, 2).parent.mkdir(parents=True)
    first = decode_records(records, model, tokenizer, compare=True, progress=False, shard=(0, 2), **DECODE)
    shard_path(out, 0, 2).write_text(json.dumps(next(first)) + "\n")  # a killed run: one record written
    changed = [dict(r, document="Another document.") for r in records]
    for index in (1, 0):
        with pytest.raises(DialogueFileError, match=r"1 of the 1 dialogues already decoded .*new --output"):
            decode_sharded(changed, out, lambda: (model, tokenizer), settings=_settings(),
                           processes=Processes(index, 2), compare=True, progress=False, **DECODE)
    _sharded(records, out, model, tokenizer, 2)  # the same input finishes the run
    assert sorted(r["id"] for r in _read(out)) == [r["id"] for r in records]
