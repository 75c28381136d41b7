"""The output projection onto chosen vocabulary columns only, for the document-free branch.

PMI-Decode needs the document-free log-probabilities of the conditional nucleus only, and up
to a per-row constant wherever that constant cancels (see :class:`~pmi_decode.PMIDecode`'s
``nucleus_projection``). The output projection (``lm_head``) is then a waste outside the
nucleus: for the embedded SmolLM2-135M it is a 49152 x 576 matrix, about a fifth of the
model's per-token compute. :class:`ColumnProjection` makes one forward of the model compute
the logits of a few columns, and puts them back into a full-width row (-inf elsewhere).

It only restricts what it can keep exact, and decides that before any restricted forward (a
forward that fails halfway has already appended to the KV cache):

* statically: the output embedding is a plain ``torch.nn.Linear`` (not a subclass: quantised,
  LoRA or offloaded heads compute something else), with no replaced ``forward``;
* on the branch's first forward, which projects onto the whole vocabulary anyway: the model's
  logits must equal what the head returned, after the only steps known to follow it in
  transformers' models that are column by column: BART-family ``final_logits_bias`` (sliced to
  the same columns), Gemma's final logit soft-cap (elementwise) and a cast of the dtype.
  Anything else after the head (a rescaling that depends on the row, a wrapper's hook) fails
  the check, and the branch keeps the full projection.
"""

from __future__ import annotations

import contextlib
import math

import torch
import torch.nn.functional as F

__all__ = ["ColumnProjection"]


def _bias_owner(model):
    """The module holding a ``final_logits_bias`` buffer of shape [1, vocab], or None."""
    bias = getattr(model, "final_logits_bias", None)
    return model if torch.is_tensor(bias) and bias.dim() == 2 and bias.shape[0] == 1 else None


def _softcap(model) -> float | None:
    config = model.config
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    value = getattr(text, "final_logit_softcapping", None)
    return float(value) if value else None


class ColumnProjection:
    """Restricts one model's output projection to chosen columns, one forward at a time.

    Use: construct with the model (``usable`` says whether its head qualifies), run the first
    full forward inside :meth:`watch` and pass its logits to :meth:`verify`, then run each later
    forward inside :meth:`restricted` and widen its logits with :meth:`widen`."""

    def __init__(self, model):
        self.model = model
        inner = model.get_base_model() if callable(getattr(model, "get_base_model", None)) else model
        head = inner.get_output_embeddings() if hasattr(inner, "get_output_embeddings") else None
        self.head = head if self._plain_linear(head) else None
        self.bias_owner = _bias_owner(inner)
        self.softcap = _softcap(inner)
        self.verified = False
        self._seen: list[torch.Tensor] = []

    @staticmethod
    def _plain_linear(head) -> bool:
        return (type(head) is torch.nn.Linear and "forward" not in vars(head) and not hasattr(head, "_hf_hook")
                and type(head.weight) is torch.nn.Parameter and head.weight.dim() == 2
                and head.weight.is_floating_point())

    @property
    def usable(self) -> bool:
        """Whether restricted forwards may run: a plain head whose first forward checked out."""
        return self.head is not None and self.verified

    @property
    def vocab_size(self) -> int:
        return self.head.weight.shape[0]

    @contextlib.contextmanager
    def watch(self):
        """Record what the head returns during a full forward (for :meth:`verify`)."""
        self._seen = []
        if self.head is None:
            yield
            return
        handle = self.head.register_forward_hook(lambda module, args, output: self._seen.append(output))
        try:
            yield
        finally:
            handle.remove()

    def verify(self, logits: torch.Tensor) -> bool:
        """Whether the model's last-position ``logits`` (rows x vocab) of the watched forward are
        the head's output, column by column; otherwise restricted forwards are never run."""
        seen, self._seen = self._seen, []
        self.verified = False
        if self.head is None or len(seen) != 1 or not torch.is_tensor(seen[0]):
            return False
        expected = seen[0][:, -1] if seen[0].dim() == 3 else seen[0]
        if expected.shape != logits.shape or expected.shape[-1] != self.vocab_size:
            return False
        if self.bias_owner is not None:
            bias = self.bias_owner.final_logits_bias
            if bias.shape[-1] != self.vocab_size:
                return False
            expected = expected + bias.to(expected.device)
        if self.softcap is not None:
            expected = torch.tanh(expected / self.softcap) * self.softcap
        # a cast (some models upcast the head's output) is column by column too
        self.verified = bool(torch.equal(expected.to(logits.dtype), logits))
        return self.verified

    @contextlib.contextmanager
    def restricted(self, columns: torch.LongTensor):
        """Within this block the model's logits hold only ``columns`` (in that order)."""
        if not self.usable:
            raise RuntimeError("ColumnProjection.restricted() before a successful verify()")
        head = self.head
        columns = columns.to(head.weight.device)
        weight = head.weight.index_select(0, columns)
        bias = head.bias.index_select(0, columns) if head.bias is not None else None
        head.forward = lambda hidden: F.linear(hidden, weight, bias)
        owner, saved = self.bias_owner, None
        if owner is not None:
            saved = owner.final_logits_bias
            owner.final_logits_bias = saved.index_select(-1, columns.to(saved.device))
        try:
            yield
        finally:
            del head.forward
            if owner is not None:
                owner.final_logits_bias = saved

    def widen(self, logits: torch.Tensor, columns: torch.LongTensor) -> torch.Tensor:
        """Rows x len(columns) logits from a restricted forward as rows x vocab, -inf elsewhere."""
        if logits.shape[-1] != columns.numel():
            raise ValueError(
                f"the restricted output projection returned {logits.shape[-1]} columns, not the "
                f"{columns.numel()} asked for: pass nucleus_projection=False for this model"
            )
        full = logits.new_full((logits.shape[0], self.vocab_size), -math.inf)
        return full.index_copy_(1, columns.to(logits.device), logits)
