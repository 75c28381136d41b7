"""Data-parallel runs over the processes ``accelerate launch`` (or ``torchrun``) starts.

Each process takes a deterministic share of the work, appends its results to its own shard
file, and the main process merges the shard files into the output in input order. Why this
shape:

- **Identical output for any process count.** Work is planned once over the whole input (for
  decoding: the same length-sorted batches a one-process run forms) and whole planned units are
  dealt out round-robin (:func:`shard_units`), so every record is computed in exactly the batch,
  and with exactly the seed, that a one-process run uses.
- **Resumable.** A shard file is append-only, one complete JSON line per record, flushed per
  unit. A rerun (with any number of processes) reads every shard file and the output, skips
  units whose records are all there, recomputes a partly written unit whole (same batch, same
  tokens) and writes only its missing records, so nothing is lost or duplicated.
- **Atomic merge.** The merged file is written beside the output and renamed over it; the shard
  folder is removed only after that, so a run killed during the merge just merges again.

With one process none of this is used: callers keep writing straight to the output.

    accelerate launch --multi_gpu --num_processes 8 -m pmi_decode.cli generate --input in.jsonl --output out.jsonl
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Sequence

from .sharing import settings_difference, shard_units

logger = logging.getLogger(__name__)

__all__ = [
    "Processes",
    "ShardError",
    "process_group",
    "read_shard_records",
    "repair_tail",
    "decode_sharded",
    "run_sharded",
    "shard_dir",
    "shard_path",
    "shard_units",
    "settings_difference",
]


class ShardError(RuntimeError):
    """A shard file or a merge that cannot be trusted; the message says which file and why."""


@dataclass(frozen=True)
class Processes:
    """Where this process stands: its rank, how many there are, its device, and the barrier."""

    index: int = 0
    count: int = 1
    device: str | None = None
    _state: object = None

    @property
    def is_main(self) -> bool:
        return self.index == 0

    def wait(self) -> None:
        """Block until every process gets here (no-op for one process)."""
        if self._state is not None and self.count > 1:
            self._state.wait_for_everyone()

    def gather(self, value) -> list:
        """Every process's ``value`` (picklable), in rank order, on every process; also a barrier.

        Without a process group (one process, or processes played one after another in a test)
        this is ``[value]``: only this process's own value is known.
        """
        if self._state is None or self.count == 1:
            return [value]
        from accelerate.utils import gather_object

        return gather_object([value])  # accelerate gathers lists and joins them: one item per process


def _launched_with_several_processes() -> bool:
    for name in ("WORLD_SIZE", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE"):
        try:
            if int(os.environ.get(name, "1")) > 1:
                return True
        except ValueError:
            pass
    return False


def process_group() -> Processes:
    """This process's place in an ``accelerate launch`` / ``torchrun`` group.

    Outside a launcher this is ``Processes(0, 1)`` and accelerate is not even imported. On a
    machine without an accelerator the group uses the gloo backend on the CPU (accelerate's
    ``PartialState(cpu=True)``), so ``accelerate launch --multi_gpu --num_processes 2`` and
    ``torchrun --nproc_per_node 2`` both work there too.
    """
    if not _launched_with_several_processes():
        return Processes()
    import torch
    from accelerate import PartialState

    cpu = os.environ.get("ACCELERATE_USE_CPU", "").lower() in ("1", "true", "yes") or not (
        torch.accelerator.is_available() if hasattr(torch, "accelerator") else torch.cuda.is_available()
    )
    state = PartialState(cpu=cpu)
    device = None if cpu else str(state.device)
    return Processes(int(state.process_index), int(state.num_processes), device, state)


def shard_dir(output: str | os.PathLike, tag: str | None = None) -> Path:
    """The folder beside ``output`` holding the per-process shard files of an unfinished run
    (``tag`` keeps runs with different options apart)."""
    output = Path(output)
    return output.parent / f"{output.name}{'.' + tag if tag else ''}.shards"


def shard_path(output: str | os.PathLike, index: int, count: int, tag: str | None = None) -> Path:
    return shard_dir(output, tag) / f"part-{index:05d}-of-{count:05d}.jsonl"


def read_shard_records(path: str | os.PathLike, settings: dict | None = None) -> list[dict]:
    """The complete records in a shard (or output) file, read without changing it.

    A last line without a newline that is not valid JSON is a record cut off by a kill (or still
    being written) and is ignored; any other bad line is an error. With ``settings``, every
    record must carry the same ``settings``.
    """
    path = Path(path)
    if not path.exists():
        return []
    data = path.read_bytes()
    lines = data.split(b"\n")
    records = []
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        last = lineno == len(lines)  # no newline after it
        try:
            obj = json.loads(line)
        except ValueError:
            if last:
                continue
            raise ShardError(f"{path}:{lineno}: not valid JSON; delete the file to recompute its records") from None
        if not isinstance(obj, dict) or "id" not in obj:
            raise ShardError(f"{path}:{lineno}: a record without an 'id'")
        if settings is not None and obj.get("settings") != settings:
            raise ShardError(
                f"{path}:{lineno}: written with other settings ({settings_difference(obj.get('settings'), settings)}); "
                "pass the same settings to resume, or write to a new --output"
            )
        records.append(obj)
    return records


def _repair_tail(path: Path) -> None:
    """Cut a half-written last line off this process's own shard file before appending to it."""
    if not path.exists():
        return
    data = path.read_bytes()
    if not data or data.endswith(b"\n"):
        return
    cut = data.rfind(b"\n") + 1
    try:
        json.loads(data[cut:])
        with open(path, "ab") as handle:
            handle.write(b"\n")
    except ValueError:
        logger.warning("%s: dropping an incomplete last line left by an interrupted run", path)
        with open(path, "r+b") as handle:
            handle.truncate(cut)


def repair_tail(path: str | os.PathLike) -> None:
    """Make an append-only JSONL file safe to append to again: a last line cut off by a kill is
    dropped, a complete last line without its newline gets one. Only the file's single writer
    may call this."""
    _repair_tail(Path(path))


def _finished(output: Path, settings: dict | None, tag: str | None, use_output: bool) -> dict[str, dict]:
    """Every record already written, by id: the output first, then all shard files (any count)."""
    done: dict[str, dict] = {}
    files = ([output] if use_output else []) + sorted(shard_dir(output, tag).glob("part-*.jsonl"))
    for path in files:
        for rec in read_shard_records(path, settings):
            done.setdefault(str(rec["id"]), rec)
    return done


def _merge(output: Path, ids: Sequence[str], settings: dict | None, tag: str | None, use_output: bool) -> int:
    done = _finished(output, settings, tag, use_output)
    missing = [i for i in ids if i not in done]
    if missing:
        raise ShardError(
            f"{len(missing)} of {len(ids)} records are in no shard file (first: {missing[:3]}); a process "
            "stopped early: rerun the same command to compute them"
        )
    wanted = set(ids)
    extra = [rec for key, rec in done.items() if key not in wanted]  # already in the output, kept
    tmp = output.with_name(output.name + ".merging")
    with open(tmp, "w", encoding="utf-8") as handle:
        for key in ids:
            handle.write(json.dumps(done[key], ensure_ascii=False) + "\n")
        for rec in extra:
            handle.write(json.dumps(rec, ensure_ascii=False) + "\n")
    os.replace(tmp, output)
    _remove_shards(output, tag)
    return len(ids)


def _remove_shards(output: Path, tag: str | None) -> None:
    """Delete the shard files once their records are in the output, then their folder if empty."""
    for path in shard_dir(output, tag).glob("part-*.jsonl"):
        path.unlink()
    try:
        shard_dir(output, tag).rmdir()
    except OSError:
        pass


def run_sharded(
    ids: Sequence,
    output: str | os.PathLike,
    compute: Callable[[int, int, set[str]], Iterable[dict]],
    *,
    settings: dict | None = None,
    processes: Processes | None = None,
    tag: str | None = None,
    resume_from_output: bool = True,
) -> dict:
    """Run ``compute`` on every process, collect its records in shard files, merge on the main one.

    Args:
        ids: the id of every input record, in input order (the merged output's order).
        output: the merged JSONL file; an existing one counts as done records.
        compute: ``compute(index, count, done_ids)`` yields this process's new output records
            (each with an ``id``); it must plan its units over the whole input, take its share
            with :func:`shard_units` and may skip records in ``done_ids``. Records already
            written are dropped here, so a recomputed unit never duplicates one.
        settings: compared with the ``settings`` of records already written.
        processes: from :func:`process_group` (default).
        tag: names the shard folder, for runs whose records carry no ``settings`` to compare.
        resume_from_output: count records already in ``output`` as done (``False``: the merge
            replaces the output, as a one-process run that rewrites its output would).

    Returns ``{"written": records this process wrote, "merged": records in the output or None
    on other processes}``. Every process must call this with the same arguments.
    """
    processes = processes or process_group()
    output = Path(output)
    ids = [str(i) for i in ids]
    if len(set(ids)) != len(ids):
        raise ValueError("ids must be unique to shard a run")
    own = shard_path(output, processes.index, processes.count, tag)
    own.parent.mkdir(parents=True, exist_ok=True)
    _repair_tail(own)
    processes.wait()  # no process reads a shard file while its owner is repairing it
    done = set(_finished(output, settings, tag, resume_from_output))
    written = 0
    with open(own, "a", encoding="utf-8") as handle:
        for rec in compute(processes.index, processes.count, set(done)):
            key = str(rec["id"])
            if key in done:
                continue
            handle.write(json.dumps(rec, ensure_ascii=False) + "\n")
            handle.flush()
            done.add(key)
            written += 1
    processes.wait()
    merged = _merge(output, ids, settings, tag, resume_from_output) if processes.is_main else None
    processes.wait()
    return {"written": written, "merged": merged}


def decode_sharded(
    records: Sequence[dict],
    output: str | os.PathLike,
    load: Callable[[], tuple],
    config=None,
    *,
    settings: dict | None = None,
    processes: Processes | None = None,
    progress: bool = True,
    **decode_options,
) -> dict:
    """:func:`~pmi_decode.batch.decode.decode_records` over several processes into ``output``.

    ``load()`` returns ``(model, tokenizer)`` on this process's device (``processes.device``:
    one accelerator per process); it is called only by a process with work left. ``config`` (a
    :class:`~pmi_decode.decode_config.DecodeConfig`) and ``decode_options`` go to
    ``decode_records`` (``compare``, ``model_name``, ``extra_settings``, or config fields);
    ``settings``, what finished records must carry, defaults to what they describe
    (:func:`~pmi_decode.batch.decode.decode_settings`).
    """
    from .decode import check_done_inputs, decode_records, decode_settings

    processes = processes or process_group()
    if settings is None:
        settings = decode_settings(config, **decode_options)
    # records already written must have been decoded from the same inputs (each process reads the
    # same files, so all refuse alike, before any of them writes)
    check_done_inputs(output, _finished(Path(output), settings, None, True), records, warn=processes.is_main)

    def compute(index, count, done):
        if all(str(r["id"]) in done for r in records):
            return
        model, tokenizer = load()
        yield from decode_records(records, model, tokenizer, config, progress=progress and processes.is_main,
                                  skip_ids=done, shard=(index, count), **decode_options)

    return run_sharded([r["id"] for r in records], output, compute, settings=settings, processes=processes)


# ---------------------------------------------------------------------------- append-only outputs
# run_sharded rewrites its output from the shard records. A caller whose output is an append-only
# file with a line format of its own (eval/begin.py's score caches: one ``{"key", "scores"}`` line
# per row, appended as scoring goes) reads the shard files with shard_records and merges them
# with append_shards instead.
__all__ += ["append_shards", "shard_records"]


def shard_records(output: str | os.PathLike, settings: dict | None = None, tag: str | None = None) -> dict[str, dict]:
    """Every complete record in the shard files beside ``output`` (of any process count), by id;
    of repeated ids the first file's record is kept.

    With ``settings``, a record written with other settings is refused: the message names the
    difference and the folder to delete to discard that unfinished run.
    """
    folder = shard_dir(output, tag)
    records: dict[str, dict] = {}
    for path in sorted(folder.glob("part-*.jsonl")):
        for record in read_shard_records(path):
            if settings is not None and record.get("settings") != settings:
                raise ShardError(
                    f"{path}: records of an unfinished run with other settings "
                    f"({settings_difference(record.get('settings'), settings)}); rerun with those settings "
                    f"to finish it, or delete {folder} to discard it"
                )
            records.setdefault(str(record["id"]), record)
    return records


def append_shards(
    output: str | os.PathLike,
    ids: Sequence[str],
    line: Callable[[dict], str],
    *,
    present: Iterable[str] = (),
    settings: dict | None = None,
    tag: str | None = None,
) -> int:
    """Append the shard files beside ``output`` to it, then remove them; returns the lines appended.

    Args:
        output: an append-only JSONL file (created if missing); a last line cut off by a kill is
            dropped first.
        ids: the planned rows, in the order a one-process run appends them. Every one must be in
            a shard file; otherwise nothing is appended and :class:`ShardError` says to rerun.
        line: the output line of a shard record, without its newline.
        present: ids already in ``output``; their shard records are not appended again, so a
            merge killed halfway is finished by merging again.
        settings, tag: as for :func:`shard_records`.

    The planned records go first, in ``ids`` order, then any other shard record (of rows another
    run planned), so the output reads as a one-process run's. Only the main process may call
    this, after every process has finished writing.
    """
    records = shard_records(output, settings, tag)
    missing = [key for key in ids if key not in records]
    if missing:
        raise ShardError(
            f"{len(missing)} of {len(ids)} rows are in no shard file of {shard_dir(output, tag)} "
            f"(first: {missing[:3]}); a process stopped early: rerun the same command to compute them"
        )
    output = Path(output)
    repair_tail(output)
    planned = set(ids)
    done = set(present)
    appended = 0
    with open(output, "a", encoding="utf-8") as handle:
        for key in list(ids) + [key for key in records if key not in planned]:
            if key not in done:
                handle.write(line(records[key]) + "\n")
                done.add(key)
                appended += 1
    _remove_shards(output, tag)
    return appended
