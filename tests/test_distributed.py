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
from tiny_models import DIALOGUES, tiny_model, tiny_tokenizer

from pmi_decode.cli import main
from pmi_decode.decode_file import decode_records, decode_settings
from pmi_decode.distributed import (
    Processes,
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
    folder = tmp_path_factory.mktemp("models") / "tiny-llama"
    tiny_model("llama", dtype=torch.float32).save_pretrained(folder)
    tiny_tokenizer("llama").save_pretrained(folder)
    return str(folder)


def _read(path):
    return [json.loads(line) for line in open(path) if line.strip()]


def _settings(**kw):
    opts = dict(DECODE, **kw)
    return decode_settings(alpha=opts["alpha"], p=opts["p"], num_beams=opts["num_beams"],
                           do_sample=opts.get("do_sample", False), max_new_tokens=opts["max_new_tokens"],
                           seed=opts["seed"])


def _sharded(records, output, model, tokenizer, count, *, order=None, **kw):
    """Run ``count`` simulated processes in ``order`` (the main one last, as it merges)."""
    opts = dict(DECODE, **kw)

    def compute(index, n, done):
        yield from decode_records(records, model, tokenizer, compare=True, progress=False, skip_ids=done,
                                  shard=(index, n), **opts)

    for index in order or list(range(count))[::-1]:
        run_sharded([r["id"] for r in records], output, compute, settings=_settings(**kw),
                    processes=Processes(index, count))


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


def test_accelerate_launch_two_processes_matches_one_process_and_resumes(tmp_path, llama_dir):
    records = _records()
    inp = tmp_path / "in.jsonl"
    inp.write_text("".join(json.dumps(r) + "\n" for r in records))
    flags = ["--model", llama_dir, "--input", str(inp), "--max-new-tokens", "5", "--num-beams", "2",
             "--batch-size", "3", "--compare", "--quiet"]
    single = tmp_path / "single.jsonl"
    assert main(["generate", *flags, "--output", str(single)]) == 0

    out = tmp_path / "two.jsonl"
    run = _launch(["generate", *flags, "--output", str(out)], 2)
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
