"""Merging shard files into an append-only output of its own format (shard_records, append_shards):
the planned rows in plan order, nothing twice, nothing half-merged, refusals that say what to do."""

from __future__ import annotations

import json

import pytest

from pmi_decode.batch.distributed import ShardError, append_shards, shard_dir, shard_path, shard_records

SETTINGS = {"metric_id": "m-1", "chunk_size": 2}


def _write_shard(output, index, count, ids, settings=SETTINGS, value=None):
    path = shard_path(output, index, count)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        for key in ids:
            handle.write(json.dumps({"id": key, "settings": settings, "scores": {"v": value or key}}) + "\n")
    return path


def _line(record):
    return json.dumps({"key": record["id"], "scores": record["scores"]})


def _keys(output):
    return [json.loads(line)["key"] for line in output.read_text().splitlines()]


def test_planned_rows_are_appended_in_plan_order_then_the_others(tmp_path):
    output = tmp_path / "cache.jsonl"
    _write_shard(output, 0, 2, ["c", "a", "x"])
    _write_shard(output, 1, 2, ["d", "b"])
    assert append_shards(output, ["a", "b", "c", "d"], _line, settings=SETTINGS) == 5
    assert _keys(output) == ["a", "b", "c", "d", "x"]  # x: sharded, planned by no one now
    assert json.loads(output.read_text().splitlines()[0]) == {"key": "a", "scores": {"v": "a"}}
    assert not shard_dir(output).exists()


def test_rows_already_in_the_output_are_not_appended_again_and_a_cut_line_is_dropped(tmp_path):
    output = tmp_path / "cache.jsonl"
    output.write_text(_line({"id": "a", "scores": {"v": "a"}}) + "\n" + '{"key": "b", "sco')
    _write_shard(output, 0, 1, ["a", "b", "c"])
    assert append_shards(output, ["a", "b", "c"], _line, present={"a"}) == 2
    assert _keys(output) == ["a", "b", "c"]


def test_a_planned_row_in_no_shard_file_is_refused_and_nothing_is_written(tmp_path):
    output = tmp_path / "cache.jsonl"
    _write_shard(output, 0, 2, ["a"])
    with pytest.raises(ShardError, match=r"1 of 2 rows are in no shard file .*\['b'\].* rerun the same command"):
        append_shards(output, ["a", "b"], _line)
    assert not output.exists()
    assert shard_path(output, 0, 2).exists()  # kept for the rerun


def test_shard_records_keeps_the_first_of_repeated_ids_and_refuses_other_settings(tmp_path):
    output = tmp_path / "cache.jsonl"
    _write_shard(output, 0, 2, ["a"], value="first")
    _write_shard(output, 1, 2, ["a", "b"], value="second")
    records = shard_records(output, SETTINGS)
    assert list(records) == ["a", "b"] and records["a"]["scores"] == {"v": "first"}
    assert shard_records(tmp_path / "other.jsonl") == {}
    _write_shard(output, 1, 2, ["c"], settings={"metric_id": "m-1", "chunk_size": 3})
    with pytest.raises(ShardError, match=r"other settings \(chunk_size: 3 in the file, 2 now\).*delete .*\.shards"):
        shard_records(output, SETTINGS)
    assert set(shard_records(output)) == {"a", "b", "c"}  # without settings nothing is compared
