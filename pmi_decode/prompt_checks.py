"""The prompt batches a caller hands PMI-Decode, checked once and laid out as every path reads them.

``PMIDecode``'s own branch and ``pmi_generate``'s paired and packed paths all read the same two
batches, the prompts with the document (handed to ``generate``) and without it (read by the
library alone). Checked in one place, a bad batch gets the same message whichever path the call
takes, and a batch two paths could read differently (a mask of 2s, a row of padding alone, a
decoder-only prompt padded on the right) is refused instead of decoded differently. The
document-free prompts are the library's to lay out, so their padding is moved to the side the
model reads without it changing a score: the left for decoder-only models (the next token is read
at the last position), the right for encoder-decoder models (BART's learned positions count from
the first column, so left padding would shift them).
"""

from __future__ import annotations

import torch

from .model_calls import left_padded, model_device, padding_id, right_padded

__all__ = ["checked_prompts", "checked_pair"]


class _Checked(dict):
    """A batch :func:`checked_prompts` returned, with what it was checked for: the paths hand it on
    (``pmi_generate`` to ``PMIDecode`` and the packed rows), and each check reads the device."""

    def __init__(self, data: dict, model, document_free: bool):
        super().__init__(data)
        self.checked_for = (id(model), document_free)


def checked_prompts(part, name: str, model, *, document_free: bool) -> dict:
    """``part`` (``input_ids`` and ``attention_mask``) checked for ``model``, as a new dict with a
    0/1 integer mask. ``name`` is how the caller knows the batch (the messages use it);
    ``document_free``: the prompts without the document, whose padding may be moved (see above).
    A prompt with the document keeps its layout, except that a decoder-only one padded on the
    right is refused: ``generate`` would read each padded row's first token at a padding position."""
    if isinstance(part, _Checked) and part.checked_for == (id(model), document_free):
        return part  # checked already for this model and role (the tensors are the ones checked)
    if not hasattr(part, "keys") or "input_ids" not in part or "attention_mask" not in part:
        raise ValueError(f"{name} must be a dict with 'input_ids' and 'attention_mask'")
    ids, mask = part["input_ids"], part["attention_mask"]
    if not torch.is_tensor(ids) or not torch.is_tensor(mask) or ids.dim() != 2 or ids.shape != mask.shape:
        shapes = [tuple(x.shape) if torch.is_tensor(x) else type(x).__name__ for x in (ids, mask)]
        raise ValueError(f"{name}['input_ids'] and ['attention_mask'] must be 2-D tensors of the same shape "
                         f"(rows x tokens), got {shapes[0]} and {shapes[1]}")
    if ids.dtype.is_floating_point or ids.dtype.is_complex or ids.dtype == torch.bool:
        raise ValueError(f"{name}['input_ids'] must hold integer token ids, got {ids.dtype}")
    device = model_device(model)
    if ids.device != device or mask.device != device:
        raise ValueError(f"{name} are on {ids.device}, but the model is on {device}: build them with "
                         "build_inputs(..., model=model), or move them with .to(model.device)")
    if ids.shape[0] == 0:
        raise ValueError(f"{name} has no rows")
    _check_vocabulary(ids, name, model)
    if bool(((mask != 0) & (mask != 1)).any()):
        odd = mask[(mask != 0) & (mask != 1)][0].item()
        raise ValueError(f"{name}['attention_mask'] must hold 0 (padding) and 1 (token) only, found {odd!r}")
    mask = mask.to(torch.long)
    empty = (mask.sum(-1) == 0).nonzero().flatten().tolist()
    if empty:
        raise ValueError(f"{name} has a row with no tokens (attention_mask all zero): rows {empty[:8]}")
    if model.config.is_encoder_decoder:
        if document_free and not bool(mask[:, 0].all()):
            ids, mask = right_padded(ids, mask, padding_id(model))
    elif not bool(mask[:, -1].all()):
        if document_free:
            ids, mask = left_padded(ids, mask, padding_id(model))
        else:
            rows = (mask[:, -1] == 0).nonzero().flatten().tolist()
            raise ValueError(f"{name} is padded on the right (rows {rows[:8]} end in padding): a decoder-only model "
                             "reads the next token at the last position, so pad on the left "
                             "(tokenizer.padding_side = 'left', as build_inputs does)")
    return _Checked({"input_ids": ids, "attention_mask": mask}, model, document_free)


def checked_pair(inputs, model) -> tuple[dict, dict]:
    """The conditional and document-free batches of ``inputs`` (what
    :func:`~pmi_decode.build_inputs` returns), each checked by :func:`checked_prompts`, one row
    each per dialogue."""
    if not hasattr(inputs, "keys") or "conditional" not in inputs or "unconditional" not in inputs:
        raise ValueError(
            "inputs must be what build_inputs returns, or a dict with 'conditional' and 'unconditional' entries"
        )
    cond, uncond = (checked_prompts(inputs[name], f"inputs['{name}']", model, document_free=name == "unconditional")
                    for name in ("conditional", "unconditional"))
    if cond["input_ids"].shape[0] != uncond["input_ids"].shape[0]:
        raise ValueError(
            f"inputs['conditional'] has {cond['input_ids'].shape[0]} rows but inputs['unconditional'] has "
            f"{uncond['input_ids'].shape[0]}: they must describe the same dialogues"
        )
    return cond, uncond


def _check_vocabulary(ids: torch.Tensor, name: str, model) -> None:
    """Refuse token ids the model's input embedding has no row for (a tokenizer of another model)."""
    try:
        embeddings = model.get_input_embeddings()
    except (AttributeError, NotImplementedError):  # a model that does not say: nothing to check against
        return
    size = getattr(embeddings, "num_embeddings", None)
    if size is None or ids.numel() == 0:
        return
    low, high = int(ids.min()), int(ids.max())
    if low < 0 or high >= size:
        bad = low if low < 0 else high
        raise ValueError(f"{name}['input_ids'] holds token id {bad}, outside the model's vocabulary of {size} "
                         "(inputs built with another model's tokenizer?)")
