"""Which of beam search's finished hypotheses to return: the PMI score's best, or the model's.

PMI-Decode's step scores decide which words a hypothesis takes. Beam search also compares whole
hypotheses by the sum of those scores, and there the PMI term says the wrong thing: every token the
document supports gains up to ``alpha x cap``, whether or not the response it belongs to answers.
Asked "Who leads the lab sessions for BIO 214?", Gemma-3-270m's beam search under the defaults'
scores returned "Professor Lena Haugen" (who teaches the module); among its own finished
hypotheses was "Dr. Marcus Idowu", the one the document names, and the one the model reading the
document finds likelier. With ``final_choice="model"`` the search is unchanged (the same finished
hypotheses) and the response returned is the one the model reading the document finds likeliest,
ranked as plain beam search ranks its own: the sum of the log-probs its tokens got (its end token
included), over its length to the power ``length_penalty``. Measured on our factual dialogues and
SQuAD 2.0 questions: docs/results/correctness/README.md, section 11.

No second forward: :class:`HypothesisScores`, a logits processor placed right before
``PMIDecode``, sees at every step the conditional log-probs that plain beam search would add (after
generate's and the caller's other processors) and carries each running hypothesis's sum from its
parent; afterwards each returned sequence's sum is looked up by its prefix.
"""

from __future__ import annotations

import math

import torch
from transformers import LogitsProcessor

from .processor import _end_token_ids

__all__ = ["FINAL_CHOICES", "check_final_choice", "HypothesisScores", "choose_by_model"]

#: ``"pmi"``: beam search's own ranking (the summed PMI-Decode step scores, the paper's);
#: ``"model"``: the conditional model's length-normalised log-likelihood of each finished response.
FINAL_CHOICES = ("pmi", "model")


def check_final_choice(value) -> str:
    """``value`` if it is one of :data:`FINAL_CHOICES`; a ValueError naming them otherwise."""
    if value not in FINAL_CHOICES:
        raise ValueError(f"final_choice must be one of {FINAL_CHOICES}, got {value!r}")
    return value


def end_id_list(value) -> list[int]:
    """generate's ``eos_token_id`` (None, an id, a list or a tensor) as a list; bad ids refused."""
    return [] if value is None else _end_token_ids(value).tolist()


class HypothesisScores(LogitsProcessor):
    """Records, during beam search, each running hypothesis's summed log-prob under the scores it
    is handed (generate's log-probs after the processors before it), and changes nothing.

    Each step: every row's parent is the previous step's row of its prompt whose tokens it
    extends (no host synchronisation; a row with none is remembered and refused at the end), its
    sum is the parent's plus the parent's score of the row's last token; the step's rows, sums and
    end-token scores are kept, so a hypothesis that ended at any step can be found afterwards.

    Args:
        beams: rows per prompt (``num_beams``).
        end_ids: the end token ids.
        log_probs: the scores handed over are log-probabilities (no processor before this one
            changes them), so a row whose scores weigh more than probability 1 is refused: raw
            logits, from a transformers release that does not hand beam search's processors
            log-probs, would rank the hypotheses wrongly. ``False`` where a processor (a repetition
            penalty, a sequence bias, the caller's own) changes them: plain beam search then sums
            the changed scores, and so does this record.
    """

    #: it only records: paired PMIDecode may follow it (:func:`pmi_decode.processor._check_nothing_before`)
    changes_no_scores = True

    def __init__(self, beams: int, end_ids: list[int], log_probs: bool = True):
        self.beams = int(beams)
        self.end_ids = list(end_ids)
        self.log_probs = bool(log_probs)
        self.start = None
        self.steps: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []
        self.last = None  # the previous call's (ids, sums, scores)
        # per step, on the device, read once by totals(): whether each row had a parent, and each
        # row's probability mass under its scores (above 1: not log-probs): three kernels a step
        self.parented: list[torch.Tensor] = []
        self.mass: list[torch.Tensor] = []
        self._on_device = None  # (end ids, first row of each prompt), on the scores' device once

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        rows = input_ids.shape[0]
        if rows % self.beams:
            raise ValueError(f"HypothesisScores: {rows} rows are not {self.beams} beams per prompt")
        if self.start is None:
            self.start = input_ids.shape[1]
            # an end id past the vocabulary (a config listing one) is never generated, as in plain decoding
            self.end_ids = [i for i in self.end_ids if i < scores.shape[-1]]
            sums = torch.zeros(rows, dtype=torch.float32, device=scores.device)
            # made once: a host list indexing a device tensor is copied from pageable host memory at
            # every step, which makes the host wait for the device
            self._on_device = (torch.tensor(self.end_ids, dtype=torch.long, device=scores.device),
                               torch.arange(0, rows, self.beams, device=input_ids.device)[:, None])
        else:
            prev_ids, prev_sums, prev_scores = self.last
            if input_ids.shape[1] != prev_ids.shape[1] + 1 or rows != prev_ids.shape[0]:
                raise ValueError("HypothesisScores: the sequences do not continue the previous step by one token")
            groups, k = rows // self.beams, self.beams
            new = input_ids[:, self.start:-1].reshape(groups, k, 1, -1)
            old = prev_ids[:, self.start:].reshape(groups, 1, k, -1)
            match = (new == old).all(-1)  # (groups, new row, old row)
            self.parented.append(match.any(-1))
            parents = (match.to(torch.int8).argmax(-1) + self._on_device[1]).reshape(-1)
            sums = prev_sums[parents] + prev_scores[parents, input_ids[:, -1]].float()
        # generate hands beam search's processors log-probs; raw logits (a release that did not) would
        # sum to a wrong ranking, so a row whose scores exceed probability 1 is remembered and refused
        if self.log_probs:
            self.mass.append(scores.float().exp().sum(dim=-1))
        ends = scores[:, self._on_device[0]].float() if self.end_ids else scores.new_zeros(rows, 0).float()
        self.steps.append((input_ids[:, self.start:].clone(), sums, ends))
        self.last = (input_ids, sums, scores.clone())  # a later processor may write into scores
        return scores

    def _lost(self) -> bool:
        """A row without a parent at some step, or a step's scores of more than probability 1."""
        orphan = bool(self.parented) and not bool(torch.cat([p.reshape(-1) for p in self.parented]).all())
        return orphan or (bool(self.mass) and bool((torch.cat(self.mass) > math.exp(1e-3)).any()))

    def totals(self, sequences: torch.LongTensor, prompt_width: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Each returned sequence's summed score and length (up to and including its first end
        token). ``sequences``: generate's output, whole hypotheses of ``beams`` per prompt."""
        if self.start is None or not self.steps:
            raise ValueError("HypothesisScores saw no decoding step")
        if self._lost():
            raise ValueError("HypothesisScores: a hypothesis did not extend one of its prompt's previous rows, or "
                             "the scores handed to it were not log-probabilities (raw logits), so the hypotheses "
                             "cannot be ranked by the model; pass final_choice='pmi'")
        generated = sequences[:, prompt_width:]
        total = torch.empty(sequences.shape[0], dtype=torch.float64)
        length = torch.empty(sequences.shape[0], dtype=torch.float64)
        for row, tokens in enumerate(generated.tolist()):
            n = next((i + 1 for i, t in enumerate(tokens) if t in self.end_ids), len(tokens))
            if n == 0 or n > len(self.steps):
                raise ValueError(f"HypothesisScores: returned sequence {row} is {n} tokens long, but "
                                 f"{len(self.steps)} steps were recorded")
            step_ids, step_sums, step_ends = self.steps[n - 1]
            group = row // self.beams
            candidates = step_ids[group * self.beams:(group + 1) * self.beams]
            prefix = generated[row, :n - 1]
            found = (candidates == prefix).all(-1).nonzero()
            if found.numel() == 0:
                raise ValueError(f"HypothesisScores: returned sequence {row} was never a running hypothesis")
            parent = group * self.beams + int(found[0, 0])
            last = tokens[n - 1]
            if last in self.end_ids:
                score = step_ends[parent, self.end_ids.index(last)]
            elif n == len(self.steps):  # cut by the length limit: its last token was chosen at the last step
                score = self.last[2][parent, last].float()
            else:
                raise ValueError(f"HypothesisScores: returned sequence {row} ends without an end token before "
                                 "the length limit")
            total[row] = float(step_sums[parent] + score)
            length[row] = n
        return total, length


def choose_by_model(output, scores: HypothesisScores, prompt_width: int, keep: int, *, length_penalty=None):
    """``output`` (generate's tensor or output object, ``scores.beams`` hypotheses per prompt)
    cut to each prompt's ``keep`` best by their recorded scores (sum / length ** length_penalty),
    best first; ties keep beam search's order. With an output object the per-sequence fields
    (``sequences``, ``sequences_scores``, ``beam_indices``) follow the chosen rows."""
    sequences = output if isinstance(output, torch.Tensor) else output.sequences
    total, length = scores.totals(sequences, prompt_width)
    penalty = 1.0 if length_penalty is None else float(length_penalty)
    ranked = (total / length.clamp(min=1.0) ** penalty).view(-1, scores.beams)
    order = torch.sort(ranked, dim=1, descending=True, stable=True).indices[:, :keep]
    rows = (order + torch.arange(ranked.shape[0]).unsqueeze(1) * scores.beams).reshape(-1).to(sequences.device)
    if isinstance(output, torch.Tensor):
        return output[rows]
    for name in ("sequences", "sequences_scores", "beam_indices"):
        value = getattr(output, name, None)
        if isinstance(value, torch.Tensor) and value.shape[0] == sequences.shape[0]:
            output[name] = value[rows]
    return output
