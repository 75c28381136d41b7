"""The paired step's scoring recorded once as a CUDA graph and replayed at every later step.

Why: at a small batch a GPU decoding step is bound by the host, which queues every kernel one
by one. GPU pass 8 (``benchmarks/results/gpu/README.md``) found BART-base's paired step at batch 1
spending about 1.5 ms more host time a step than plain decoding, for about 60 added small kernels
(the document-free half's log-softmax, the nucleus, the PMI mix, the conditional end), on a step
whose device work is about 1.1 ms. A CUDA graph replays those same kernels with one launch, so
the scores are bit for bit the eager step's: the tokens cannot change, only the host time.

What is recorded is a pure function of the step's tensors (no host reads, no Python state that
changes between steps): a step whose shapes were never seen runs eagerly; the second step of a
shape records the graph; every later step copies its inputs into the recorded ones, replays,
and hands back copies of the outputs (``generate`` may keep a step's scores, and the next replay
overwrites the recorded outputs).
"""

from __future__ import annotations

import logging
import warnings
from typing import Callable

import torch

#: Device types on which the paired and packed steps record their scoring as a graph. On since GPU
#: pass 10 (``benchmarks/results/gpu/pass10``, an H200): the same tokens as the eager step in every
#: timed case and the whole exactness suite with every step recorded; greedy search at batch 1
#: 1.28x -> 1.15x plain (BART-base), 1.29x -> 1.18x (GPT-2 small). ``()`` turns it off.
GRAPHED_ON: tuple[str, ...] = ("cuda",)
#: Largest step (the scores of both halves together, rows x vocabulary) that is recorded. The
#: graph keeps its own memory for the step's intermediates for the whole call (the eager step's
#: peak, in a pool of its own), and only small, latency-bound steps gain from it: the largest timed
#: as gaining is BART-base's greedy batch 16 (1.6M scores; GPU pass 10). Larger steps stay eager
#: until a pass times them with their memory (``benchmarks/switch_ab.py --switch step-graph-large``):
#: the Llama shape's beam 4 at batch 8 (3.1M), whose memory is at the issue's 1.25x line.
MAX_ELEMENTS = 1 << 21

Recorded = tuple[list[torch.Tensor], list[torch.Tensor], Callable[[], None]]
_EAGER = "eager"  # a shape whose step could not be recorded

logger = logging.getLogger(__name__)


class NotRecordable(RuntimeError):
    """The function reads a device value on the host (or does something else a graph cannot
    hold), found by a warm-up run before anything is recorded."""


def _set_sync_check(mode) -> None:
    """CUDA's synchronisation check set to ``mode``, without torch's warning at each switch that the
    check is a prototype (the user did not ask for it)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Synchronization debug mode", category=UserWarning)
        torch.cuda.set_sync_debug_mode(mode)


def cuda_record(fn: Callable, inputs: tuple[torch.Tensor, ...]) -> Recorded:
    """Record ``fn`` on copies of ``inputs`` as a CUDA graph: (recorded inputs, recorded
    outputs, replay). One warm-up run first, on the stream the graph is then recorded on (lazily
    made library handles belong to a stream), with CUDA's synchronisation check set to fail: a
    host read inside ``fn`` raises :class:`NotRecordable` there, before a capture could break."""
    static_in = [t.clone() for t in inputs]
    device = static_in[0].device
    side = torch.cuda.Stream(device=device)
    side.wait_stream(torch.cuda.current_stream(device))
    previous = torch.cuda.get_sync_debug_mode()
    try:
        with torch.cuda.stream(side):
            _set_sync_check("error")
            fn(*static_in)
    except RuntimeError as error:
        raise NotRecordable(str(error)) from error
    finally:
        _set_sync_check(previous)
    torch.cuda.current_stream(device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=side):
        static_out = list(fn(*static_in))
    return static_in, static_out, graph.replay


def host_record(fn: Callable, inputs: tuple[torch.Tensor, ...]) -> Recorded:
    """A stand-in for :func:`cuda_record` where there is no CUDA (tests): the same recorded
    buffers, and a replay that reruns ``fn`` on the recorded inputs and writes into the recorded
    outputs, so a caller that forgot to copy in or out gets wrong values, as it would on a GPU."""
    static_in = [t.clone() for t in inputs]
    static_out = [o.clone() for o in fn(*static_in)]

    def replay() -> None:
        for buffer, value in zip(static_out, fn(*static_in)):
            buffer.copy_(value)

    return static_in, static_out, replay


class StepGraph:
    """``fn`` (tensors in, a tuple of tensors out) run eagerly at the first step of each input
    shape, recorded at the second (by ``record``; by default :func:`cuda_record` on CUDA and
    :func:`host_record` elsewhere) and replayed from then on. Where ``record`` finds ``fn`` not
    recordable (:class:`NotRecordable`), that shape runs eagerly from then on, with a warning:
    the same scores, without the saving."""

    def __init__(self, fn: Callable, record: Callable | None = None):
        self.fn = fn
        self.record = record
        self.recorded: dict[tuple, Recorded | None] = {}
        self.replays = 0

    def __call__(self, *inputs: torch.Tensor, settings: tuple = ()) -> tuple[torch.Tensor, ...]:
        """``settings``: the values ``fn`` reads besides its inputs (alpha, p, ...); a graph holds
        them as they were when it was recorded, so other settings get a graph of their own."""
        key = (settings, *((tuple(t.shape), t.dtype, t.device) for t in inputs))
        if key not in self.recorded:
            self.recorded[key] = None
            return tuple(self.fn(*inputs))
        if self.recorded[key] is None:
            record = self.record or (cuda_record if inputs[0].device.type == "cuda" else host_record)
            try:
                self.recorded[key] = record(self.fn, inputs)
            except NotRecordable as error:
                logger.warning("PMI-Decode's step cannot be recorded as a CUDA graph (%s); it runs eagerly", error)
                self.recorded[key] = _EAGER
        if self.recorded[key] is _EAGER:
            return tuple(self.fn(*inputs))
        static_in, static_out, replay = self.recorded[key]
        for buffer, value in zip(static_in, inputs):
            buffer.copy_(value)
        replay()
        self.replays += 1
        return tuple(out.clone() for out in static_out)


def graphed(*inputs: torch.Tensor) -> bool:
    """Whether a step on these score tensors (together at most :data:`MAX_ELEMENTS`, on a device
    of :data:`GRAPHED_ON`) is recorded as a graph."""
    return inputs[0].device.type in GRAPHED_ON and sum(t.numel() for t in inputs) <= MAX_ELEMENTS
