"""The speed-ups the library turns on by device type, all in one table.

Each speed-up's device types are a tuple in the module that uses it, read there at every call, so
a test or a benchmark patches it there; that module says why it is on where it is. This table is
the one place that lists them: ``tests/conftest.py`` turns each on for the test device by name
(``PMI_DECODE_TEST_<NAME>=1``), ``benchmarks/switch_ab.py --defaults-of`` runs one device with
another's choices, and ``tests/test_layout.py`` fails when a module holds such a tuple that is not
listed here.
"""

from __future__ import annotations

from pmi_decode import cross_attention_cache, packed, paired, scores, step_graph

__all__ = ["BY_DEVICE", "on_for"]

#: name: (module, attribute naming the device types the speed-up is on for)
BY_DEVICE = {
    # the paired and packed steps' scoring recorded once as a CUDA graph and replayed
    "step_graph": (step_graph, "GRAPHED_ON"),
    # the packed path's cache written into buffers that grow in chunks, not concatenated each step
    "buffered_cache": (packed, "BUFFERED_ON"),
    # the packed path's beams holding each prompt's positions once (pmi_decode.shared_positions)
    "shared_positions": (packed, "SHARED_ON"),
    # encoder-decoder beam search holding the cross-attention once per prompt
    "cross_attention_once": (cross_attention_cache, "HELD_ONCE_ON"),
    # the paired step's checks read at once, not queued and read every few steps
    "checks_read_at_once": (paired, "READ_AT_ONCE_ON"),
    # the nucleus found by a top k first, a full sort only for the rows it does not settle
    "staged_nucleus": (scores, "STAGED_ON"),
}


def on_for(device_type: str) -> dict[str, bool]:
    """Which speed-ups a device type (``"cpu"``, ``"cuda"``) gets now, by name."""
    return {name: device_type in getattr(module, attribute) for name, (module, attribute) in BY_DEVICE.items()}
