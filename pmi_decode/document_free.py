"""The document-free branch of separate mode: the model run on the unconditional inputs with its own KV cache.

:class:`~pmi_decode.PMIDecode` given ``model=`` and ``unconditional_inputs=`` builds one
:class:`DocumentFreeBranch` per ``generate`` call: it prefills the unconditional prompts once
(repeated for beams and returned sequences), then advances one token a step, following each
row to its parent after beam reordering, and projects onto chosen vocabulary columns only where
the model's head allows it (:mod:`pmi_decode.projection`). A step that needs no document-free
distribution can be deferred (:meth:`DocumentFreeBranch.defer`): the next step that needs one
runs the tokens it skipped in one forward.
"""

from __future__ import annotations

import contextlib

import torch
from transformers.modeling_outputs import BaseModelOutput

from .forward_watch import branch_forward
from .model_calls import accepts_keyword, cache_keyword, prefill, returned_cache
from .projection import ColumnProjection

__all__ = ["DocumentFreeBranch"]


class DocumentFreeBranch:
    """The document-free branch of one generation: its own KV cache, advanced one token a step.

    ``project_columns``: later steps may project onto chosen vocabulary columns only (see
    :meth:`step`); the first forward projects onto the whole vocabulary and decides whether the
    model's head allows it (:class:`~pmi_decode.projection.ColumnProjection`)."""

    def __init__(self, model, inputs: dict, input_ids: torch.LongTensor, prompts: int | None,
                 project_columns: bool = False):
        self.model = model
        self.projection = ColumnProjection(model) if project_columns else None
        watch = self.projection.watch() if self.projection is not None else contextlib.nullcontext()
        self.enc_dec = bool(getattr(model.config, "is_encoder_decoder", False))
        self.cache_keyword = cache_keyword(model)
        ids, mask = inputs["input_ids"], inputs["attention_mask"]
        rows, batch = input_ids.shape[0], ids.shape[0]
        if (prompts is not None and prompts != batch) or rows % batch != 0:
            given = f"{prompts} prompts ({rows} rows)" if prompts is not None else f"{rows} rows"
            raise ValueError(
                f"unconditional_inputs has {batch} rows, but generate is decoding {given}; it needs one "
                "row per prompt given to generate (the processor expands them to beams and returned sequences)"
            )
        self.repeats = rows // batch
        self.prompt_len = input_ids.shape[1]
        if not self.enc_dec:
            self._check_grouping(input_ids, ids, mask)
        with torch.no_grad(), branch_forward(), watch:
            if self.enc_dec:
                encoder = model.get_encoder()
                enc = encoder(input_ids=ids, attention_mask=mask, return_dict=True)
                hidden = enc.last_hidden_state.repeat_interleave(self.repeats, dim=0)
                self.encoder_outputs = BaseModelOutput(last_hidden_state=hidden)
                self.mask = mask.repeat_interleave(self.repeats, dim=0)
                out = model(
                    encoder_outputs=self.encoder_outputs,
                    attention_mask=self.mask,
                    decoder_input_ids=input_ids,
                    use_cache=True,
                    return_dict=True,
                )
                self.cache = returned_cache(out)
                logits = out.logits[:, -1]
            else:
                self.use_positions = accepts_keyword(model, "position_ids")
                self.keep_last = accepts_keyword(model, "logits_to_keep")
                self.cache, logits = prefill(model, ids, mask, self.repeats)
                self.mask = mask.repeat_interleave(self.repeats, dim=0)
        if self.projection is not None and not self.projection.verify(logits):
            self.projection = None  # a head it cannot restrict exactly: every step projects in full
        if not self.enc_dec:
            logits = logits.repeat_interleave(self.repeats, dim=0)
        self.last_ids = input_ids.clone()
        self.first_logits = logits
        self.fed = input_ids.shape[1]  # columns of generate's sequences the cache holds
        self.pending_parents: torch.LongTensor | None = None  # cache row of each row, while steps are deferred
        self.forwards: list[int] = []  # tokens run by each forward after the prefill

    def _check_grouping(self, input_ids, ids, mask) -> None:
        """generate's rows must come in groups of ``repeats`` copies of one prompt; and where two
        rows of generate share a prompt (copies, or the same dialogue twice), their unconditional
        rows must be the same too, or the rows were paired with the wrong prompts."""
        batch = ids.shape[0]
        grouped = input_ids.view(batch, self.repeats, -1)
        if not bool((grouped == grouped[:, :1]).all()):
            raise ValueError(
                f"unconditional_inputs has {batch} rows, but generate's rows do not group into {batch} prompts "
                f"of {self.repeats} copies each: pass one unconditional row per prompt given to generate"
            )
        prompts = grouped[:, 0]
        same_cond = (prompts[1:] == prompts[:-1]).all(-1)
        same_uncond = (ids[1:] == ids[:-1]).all(-1) & (mask[1:] == mask[:-1]).all(-1)
        bad = (same_cond & ~same_uncond).nonzero()
        if bad.numel():
            i = int(bad[0, 0])
            raise ValueError(
                f"unconditional_inputs rows {i} and {i + 1} differ, but generate gives them the same prompt: pass "
                "one unconditional row per prompt given to generate, in its order and before num_beams or "
                "num_return_sequences copies it (e.g. build_inputs(...)['unconditional']); two dialogues whose "
                "prompts with the document are the same must have the same prompt without it"
            )

    def parents(self, input_ids: torch.LongTensor) -> torch.LongTensor | None:
        """Each row's parent among the previous step's rows (same prompt group, same prefix), or
        None when the sequences do not continue this generation."""
        prev = self.last_ids
        if input_ids.shape[0] != prev.shape[0] or input_ids.shape[1] != prev.shape[1] + 1:
            return None
        rows, k = prev.shape[0], self.repeats
        new_prefix = input_ids[:, self.prompt_len : -1].reshape(rows // k, k, 1, -1)
        old = prev[:, self.prompt_len :].reshape(rows // k, 1, k, -1)
        if not bool((input_ids[:, : self.prompt_len] == prev[:, : self.prompt_len]).all()):
            return None
        match = (new_prefix == old).all(dim=-1)  # (groups, new row, old row)
        if not bool(match.any(dim=-1).all()):
            return None
        local = match.to(torch.int8).argmax(dim=-1)
        base = torch.arange(0, rows, k, device=input_ids.device).unsqueeze(1)
        return (local + base).reshape(-1)

    def defer(self, input_ids: torch.LongTensor, parents: torch.LongTensor) -> None:
        """Follow a step without running it (its document-free distribution is not needed): the
        rows' parents are composed with those of earlier deferred steps, and :meth:`step` runs
        every token not yet in the cache at once."""
        self.pending_parents = parents if self.pending_parents is None else self.pending_parents[parents]
        self.last_ids = input_ids.clone()

    def step(self, input_ids: torch.LongTensor, parents: torch.LongTensor,
             columns: torch.LongTensor | None = None) -> torch.Tensor:
        """The next-token logits of every row. With ``columns`` (and a head that allows it), only
        those columns are projected: the others come back as -inf. Tokens of deferred steps run
        in the same forward (the KV cache takes several positions at once)."""
        if self.pending_parents is not None:
            parents, self.pending_parents = self.pending_parents[parents], None
        if not bool((parents == torch.arange(parents.numel(), device=parents.device)).all()):
            self.cache.reorder_cache(parents)
        token = input_ids[:, self.fed:]
        self.fed = input_ids.shape[1]
        self.forwards.append(token.shape[1])
        if columns is None or self.projection is None:
            columns, restrict = None, contextlib.nullcontext()
        else:
            restrict = self.projection.restricted(columns)
        with torch.no_grad(), branch_forward(), restrict:
            if self.enc_dec:
                out = self.model(
                    encoder_outputs=self.encoder_outputs,
                    attention_mask=self.mask,
                    decoder_input_ids=token,
                    use_cache=True,
                    return_dict=True,
                    **{self.cache_keyword: self.cache},
                )
            else:
                out = self.model(**self._decoder_only_kwargs(token))
        self.cache = returned_cache(out)
        self.last_ids = input_ids.clone()
        logits = out.logits[:, -1]
        return logits if columns is None else self.projection.widen(logits, columns)


    def _decoder_only_kwargs(self, tokens: torch.LongTensor) -> dict:
        """The forward's arguments for ``tokens`` (one or more new columns) after the cache: the
        mask grows by their columns, and their positions follow each row's own (left-padded) length."""
        new = tokens.shape[1]
        self.mask = torch.cat([self.mask, self.mask.new_ones((self.mask.shape[0], new))], dim=-1)
        kwargs = {
            "input_ids": tokens,
            "attention_mask": self.mask,
            self.cache_keyword: self.cache,
            "use_cache": True,
            "return_dict": True,
        }
        if self.use_positions:
            last = self.mask.long().sum(-1, keepdim=True) - 1
            kwargs["position_ids"] = last if new == 1 else last - new + 1 + torch.arange(new, device=last.device)
        if new > 1 and self.keep_last:
            kwargs["logits_to_keep"] = 1  # only the last position's logits are read
        return kwargs
