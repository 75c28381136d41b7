"""A slow, obviously-correct PMI-Decode processor that the fast paths are checked against.

Every step and every row, it rebuilds that row's whole document-free sequence (the unpadded
history-only prompt plus the tokens generated so far), runs the model on it from scratch with no
cache and no padding, and picks the nucleus with a plain Python loop over the sorted tokens.
"""

from __future__ import annotations

import math

import torch
from transformers import LogitsProcessor


class ReferencePMIDecode(LogitsProcessor):
    def __init__(self, alpha, p, *, model, unconditional_ids: list[list[int]], conditional_prompt_length: int,
                 plausibility: float = 0.0, pmi_cap: float | None = None):
        self.alpha, self.p, self.plausibility, self.pmi_cap = alpha, p, plausibility, pmi_cap
        self.model = model
        self.unconditional_ids = unconditional_ids
        self.prompt_length = conditional_prompt_length
        self.enc_dec = model.config.is_encoder_decoder
        self.gaps: list[float] = []  # per row and step: best score minus the runner-up's

    def _unconditional_log_probs(self, row_ids: torch.Tensor, prompt: list[int], dtype) -> torch.Tensor:
        device = row_ids.device
        with torch.no_grad():
            if self.enc_dec:
                logits = self.model(
                    input_ids=torch.tensor([prompt], device=device), decoder_input_ids=row_ids[None]
                ).logits[0, -1]
            else:
                generated = row_ids[self.prompt_length :].tolist()
                seq = torch.tensor([prompt + generated], device=device)
                logits = self.model(input_ids=seq).logits[0, -1]
        return torch.log_softmax(logits.to(dtype), dim=-1)

    def _nucleus(self, lp_c_row: torch.Tensor) -> list[int]:
        finite = [v for v in range(lp_c_row.numel()) if math.isfinite(lp_c_row[v].item())]
        if self.p >= 1.0:
            return finite
        probs = lp_c_row.exp()
        order = torch.sort(probs, descending=True).indices.tolist()
        kept, mass = [], torch.zeros((), dtype=probs.dtype)
        for v in order:
            kept.append(v)
            mass = mass + probs[v]
            if mass >= self.p:
                break
        finite_set = set(finite)
        return [v for v in kept if v in finite_set] or kept[:1]

    def __call__(self, input_ids, scores):
        rows = input_ids.shape[0]
        per_prompt = rows // len(self.unconditional_ids)
        lp_c = torch.log_softmax(scores, dim=-1)
        out = torch.full_like(scores, -math.inf)
        for r in range(rows):
            lp_u = self._unconditional_log_probs(input_ids[r], self.unconditional_ids[r // per_prompt], scores.dtype)
            alpha = self._row_alpha(lp_c[r], lp_u)
            top = max(lp_c[r, v].item() for v in range(lp_c.shape[1]))
            for v in self._nucleus(lp_c[r]):
                # the plausibility head, where the PMI term is on: at least that share of the top token
                if self.plausibility and self.alpha != 0 and math.exp(lp_c[r, v].item() - top) < self.plausibility:
                    continue
                pmi = lp_c[r, v] - lp_u[v]
                if self.pmi_cap is not None:
                    pmi = min(pmi, torch.tensor(self.pmi_cap, dtype=pmi.dtype))  # the document's support, capped
                out[r, v] = (1 - alpha) * lp_c[r, v] + alpha * pmi
            best = out[r].topk(min(2, out.shape[-1])).values.tolist()
            if len(best) == 2 and math.isfinite(best[1]):
                self.gaps.append(best[0] - best[1])
        return out

    def _row_alpha(self, lp_c_row, lp_u_row) -> float:
        """The PMI weight of one row at one step (fixed here; subclasses may derive it)."""
        return self.alpha


def unpadded(batch: dict) -> list[list[int]]:
    """The rows of a padded ``{"input_ids", "attention_mask"}`` batch without their padding."""
    return [ids[mask.bool()].tolist() for ids, mask in zip(batch["input_ids"], batch["attention_mask"])]


def reference_for(model, inputs: dict, alpha=0.5, p=0.9, **options) -> ReferencePMIDecode:
    """The reference processor for the dialogues of ``inputs`` (what ``build_inputs`` returns):
    their document-free prompts without padding, and the conditional prompts' width."""
    return ReferencePMIDecode(alpha, p, model=model, unconditional_ids=unpadded(inputs["unconditional"]),
                              conditional_prompt_length=inputs["conditional"]["input_ids"].shape[1], **options)
