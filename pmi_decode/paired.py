"""The paired batch: conditional and document-free rows as one ``generate`` batch, checked to be that batch.

:class:`~pmi_decode.PMIDecode` without ``model=`` scores a batch whose first half holds the
conditional rows and whose second half the unconditional rows (:func:`stack_inputs`); it gives
both halves the same scores, so they decode the same tokens in greedy and beam search, and one
forward per step serves both. :class:`StackedBatch` remembers the batch it built and refuses a
step of any other; :func:`conditional_half` takes the answers back from ``generate``'s output.
"""

from __future__ import annotations

import functools
import weakref

import torch

from .forward_watch import ForwardLog
from .model_calls import padding_id
from .prompt_checks import checked_pair
from .step_graph import StepGraph, graphed

__all__ = ["stack_inputs", "conditional_half", "StackedBatch", "StepChecks", "STACK_FIX", "CHECK_EVERY"]

#: How to build a batch the paired processor accepts (ends each refusal of a batch it did not build).
STACK_FIX = (
    "build the batch with the processor: out = model.generate(**pmi.stack(inputs, model), "
    "logits_processor=[pmi]); pmi.conditional(out)  (or use PMIDecode(alpha, p, model=model, "
    "unconditional_inputs=inputs['unconditional']) with the conditional inputs)"
)


def stack_inputs(model, inputs, pad_token_id: int | None = None) -> dict:
    """One batch for paired mode: the conditional rows, then the unconditional rows, each part
    keeping its own padding, widened on the padding side (left for decoder-only models) to the
    wider of the two. ``inputs`` is what :func:`~pmi_decode.build_inputs` returns."""
    cond, uncond = checked_pair(inputs, model)
    pad_id = padding_id(model) if pad_token_id is None else int(pad_token_id)
    left = not model.config.is_encoder_decoder
    width = max(cond["input_ids"].shape[1], uncond["input_ids"].shape[1])

    def widen(part: dict) -> dict:
        extra = width - part["input_ids"].shape[1]
        if extra == 0:
            return part
        pad = (extra, 0) if left else (0, extra)
        return {
            "input_ids": torch.nn.functional.pad(part["input_ids"], pad, value=pad_id),
            "attention_mask": torch.nn.functional.pad(part["attention_mask"], pad, value=0),
        }

    c, u = widen(cond), widen(uncond)
    return {key: torch.cat([c[key], u[key]], dim=0) for key in ("input_ids", "attention_mask")}


def conditional_half(output):
    """The conditional rows of what ``generate`` returned for a stacked batch (a tensor, or a
    ``ModelOutput`` whose per-row fields are halved; its ``past_key_values`` is dropped, as the
    cache holds both halves)."""

    def half(value):
        if torch.is_tensor(value) and value.dim() > 0:
            return value[: value.shape[0] // 2]
        if isinstance(value, tuple) and value and torch.is_tensor(value[0]):
            return tuple(v[: v.shape[0] // 2] for v in value)
        return value

    rows = output.shape[0] if torch.is_tensor(output) else getattr(output, "sequences", None)
    rows = rows.shape[0] if torch.is_tensor(rows) else rows
    if rows is None or rows % 2:
        raise ValueError(
            "conditional() takes what generate returned for a stacked batch (an even number of rows: the "
            "conditional half, then the unconditional half)"
        )
    if torch.is_tensor(output):
        return half(output)
    fields = {key: half(val) for key, val in output.items()}
    fields.pop("past_key_values", None)
    fields.pop("cache", None)  # its name from transformers 5.24 on
    return type(output)(**fields)


#: On an accelerator a paired step's checks are read together every this many steps, and when the
#: output is taken (:meth:`PMIDecode.conditional <pmi_decode.PMIDecode.conditional>`): reading a
#: device value makes the host wait for the device, which at a small batch costs a step's latency.
CHECK_EVERY = 16
#: Device types on which each check is read at once (there reading a value costs nothing).
READ_AT_ONCE_ON = ("cpu",)


class StepChecks:
    """The paired step's checks that need a tensor's values (the prompts are the stacked batch,
    both halves decoded the same tokens, no NaN). On a CPU each is read at once; on an
    accelerator the failure flags queue on the device and are read every :data:`CHECK_EVERY`
    steps and by :meth:`flush`, so no step waits for the device. A failure raises ValueError
    with the first failed check's message either way, before the output is handed over."""

    def __init__(self):
        self.pending: list[tuple[torch.Tensor, str]] = []
        self.steps = 0

    def require(self, failed: torch.Tensor, message: str) -> None:
        if failed.device.type in READ_AT_ONCE_ON:
            if bool(failed):
                raise ValueError(message)
            return
        self.pending.append((failed.reshape(()), message))

    def step_done(self) -> None:
        self.steps += 1
        if self.steps % CHECK_EVERY == 0:
            self.flush()

    def flush(self) -> None:
        pending, self.pending = self.pending, []
        if not pending:
            return
        failed = torch.stack([flag for flag, _ in pending])
        if bool(failed.any()):
            raise ValueError(pending[int(failed.to(torch.int8).argmax())][1])


class StackedBatch:
    """The batch :meth:`PMIDecode.stack <pmi_decode.PMIDecode.stack>` built for ``model``: what
    each paired step checks ``generate``'s sequences against before scoring them."""

    def __init__(self, input_ids: torch.LongTensor, model):
        self.input_ids = input_ids.clone()
        self.enc_dec = bool(model.config.is_encoder_decoder)
        self.model = weakref.ref(model)
        self._expanded: dict = {}  # the prompts repeated for the last number of copies per row seen
        self.checks = StepChecks()
        self._graph: StepGraph | None = None  # the step recorded as a graph, where it is

    @property
    def width(self) -> int:
        """Width of the stacked prompt: generated tokens start there in a decoder-only output."""
        return self.input_ids.shape[1]

    def shared_start(self, input_ids: torch.LongTensor, log: ForwardLog) -> int:
        """Check that generate runs this batch; return where the halves' shared decoded tokens
        start. ``log``: the processor's record of the model's forwards (encoder-decoder models
        are checked on the encoder inputs of the generate call a step opens)."""
        stacked = self.input_ids
        rows = input_ids.shape[0]
        if rows % stacked.shape[0]:
            raise ValueError(
                f"PMIDecode(alpha, p): generate runs {rows} rows, not a multiple of the {stacked.shape[0]} rows "
                f"stack() built: {STACK_FIX}"
            )
        copies = rows // stacked.shape[0]
        if self.enc_dec:
            # decoder sequences restart at each generate call, so the encoder batch that call ran is what
            # must be checked; a call is recognised by its fresh KV cache, as in separate mode (a decoder
            # length alone would take a new call with a decoder prefix for the next step of the last one)
            runs = log.take_encoder_runs()
            if not log.starts_generation(input_ids):
                return 0
            if not runs:
                raise ValueError(
                    "PMIDecode(alpha, p): generate ran no encoder on its prompts (encoder_outputs= given?), so the "
                    f"stacked batch cannot be checked: pass the stacked input_ids instead. {STACK_FIX}"
                )
            if not any(ids.shape == stacked.shape and torch.equal(ids.to(stacked.device), stacked) for ids in runs):
                raise ValueError(
                    f"PMIDecode(alpha, p): generate's encoder inputs are not the stacked batch: {STACK_FIX}"
                )
            return 0
        if copies not in self._expanded:
            self._expanded = {copies: stacked.to(input_ids.device).repeat_interleave(copies, dim=0)}
        width = stacked.shape[1]
        message = f"PMIDecode(alpha, p): generate's prompts are not the stacked batch: {STACK_FIX}"
        if input_ids.shape[1] < width:
            raise ValueError(message)
        self.checks.require((input_ids[:, :width] != self._expanded[copies]).any(), message)
        return width

    def step(self, input_ids: torch.LongTensor, scores: torch.Tensor, log: ForwardLog, conditional_processors,
             score, graph_settings: tuple | None = None) -> torch.Tensor:
        """One paired step: check the batch and that both halves decoded the same tokens, apply
        ``conditional_processors`` to the conditional half, and give both halves
        ``score(conditional scores, unconditional log-probs)``, where the second argument is a
        callable that ``score`` calls only if it needs the document-free distribution.
        ``graph_settings``: where ``score`` reads no value on the host and keeps no state between
        steps, the settings it reads (None otherwise); a small step on a device of
        :data:`~pmi_decode.step_graph.GRAPHED_ON` may then be recorded as a CUDA graph, one per
        settings (:mod:`pmi_decode.step_graph`: same kernels, same scores)."""
        start = self.shared_start(input_ids, log)
        if getattr(self.model(), "training", False):
            raise ValueError("model is in training mode: call model.eval() so both halves see the same model")
        half = scores.shape[0] // 2
        self.checks.require(
            (input_ids[:half, start:] != input_ids[half:, start:]).any(),
            "paired PMIDecode: the conditional and unconditional halves decoded different tokens. Paired "
            "mode works with greedy search and beam search only (pmi_generate also samples on it); for "
            "sampling use PMIDecode(alpha, p, model=..., unconditional_inputs=...) or pmi_generate",
        )
        cond = scores[:half]
        if len(conditional_processors):
            cond = conditional_processors(input_ids[:half], cond)
        if graph_settings is not None and graphed(cond, scores[half:]):
            if self._graph is None:
                self._graph = StepGraph(functools.partial(_both_halves, score))
            both, *nan = self._graph(cond, scores[half:], settings=graph_settings)
        else:
            both, *nan = _both_halves(score, cond, scores[half:])
        for flag in nan:
            self.checks.require(flag, "paired PMIDecode: the unconditional half's scores hold NaN")
        self.checks.step_done()
        return both


def _both_halves(score, cond: torch.Tensor, uncond: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The step's scores for both halves, ``score(cond, document-free log-probs)`` twice, and,
    where ``score`` asked for the document-free log-probs, whether they hold NaN: a pure
    function of the two halves' scores, which :class:`~pmi_decode.step_graph.StepGraph` can record."""
    flags = []

    def log_probs() -> torch.Tensor:
        lp_u = torch.log_softmax(uncond, dim=-1)
        flags.append(torch.isnan(lp_u).any())
        return lp_u

    out = score(cond, log_probs)
    return (torch.cat([out, out], dim=0), *flags)
