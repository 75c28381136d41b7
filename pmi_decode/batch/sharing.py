"""What one-process and multi-process runs share: a process's share of the planned work, and
the message that says how a file's settings differ from a rerun's.

A leaf module (it imports nothing of the package), so batch decoding
(:mod:`pmi_decode.batch.decode`) and the multi-process runner (:mod:`pmi_decode.batch.distributed`)
both use these without importing each other.
"""

from __future__ import annotations

import json
from typing import Sequence

__all__ = ["settings_difference", "shard_units"]


def shard_units(units: Sequence, index: int, count: int) -> list:
    """Units ``index, index + count, ...``: round-robin, so with units sorted longest first
    every process gets a similar mix of long and short work (accelerate's
    ``split_between_processes`` hands out contiguous slices: the first process would get all the
    longest batches)."""
    if count < 1 or not 0 <= index < count:
        raise ValueError(f"process index must be in [0, {count}), got {index} of {count}")
    return list(units[index::count])


def settings_difference(written, now) -> str:
    """The keys on which two settings dicts differ, each with both values, e.g.
    ``alpha: 0.25 in the file, 0.5 now`` (what a refused resume must say, rather than print
    both dicts whole)."""
    if not isinstance(written, dict) or not isinstance(now, dict):
        return f"{written!r} in the file, {now!r} now"
    missing = object()
    parts = []
    for key in list(written) + [k for k in now if k not in written]:
        old, new = written.get(key, missing), now.get(key, missing)
        if old != new:
            show = lambda v: "absent" if v is missing else json.dumps(v, sort_keys=True, default=str)  # noqa: E731
            parts.append(f"{key}: {show(old)} in the file, {show(new)} now")
    return "; ".join(parts) or "the same keys and values, in another form"
