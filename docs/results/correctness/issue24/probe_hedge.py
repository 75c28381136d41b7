"""Probe (not in the library): an abstaining opening gets no PMI term, neither gain nor loss.

PMI scores a token by how much the document supports it. "I don't know" is not a claim about the
document, yet the document-free model says it more readily, so its tokens lose PMI and beam search
drops the hedges plain decoding makes (Gemma-3-270m hedges on 6 of the 112 unanswerable Normans
questions; every setting tried keeps none). Here, while a hypothesis's response so far is a prefix
of an abstaining opening (HEDGES, tokenised by the model's own tokenizer, with and without a
leading space), the tokens that continue it score with a PMI of 0 and are kept whatever the
nucleus and plausibility cuts say; every other token scores as before. Runs `pmi-decode` with the
processor patched; the files it writes say nothing of the patch. Commands (this folder's
*.hedge*.jsonl):

    python docs/results/correctness/issue24/probe_hedge.py generate --model embedded-gemma \
        --input IN.jsonl --output OUT.jsonl [--alpha 0.5 --pmi-cap 0.001]

With SCORE=penalty the score itself changes too: log P(v | d, h, r<t) + alpha * min(PMI, 0), plain
decoding's log-prob less a penalty for tokens the document makes less likely (no token gains, and
unlike `--pmi-cap 0.001` nothing is tempered by (1 - alpha)); nucleus, plausibility head, ending
and guards as in the command. (*.penalty*.jsonl, with --alpha 0.5.)

With NO_HEDGES=1 it must reproduce the unpatched command's responses (checked on 8 dialogues of the
second factual set, SmolLM2, `--alpha 0.5 --pmi-cap 0.001`, against `factual_heldout.veto50.jsonl`).
"""
import os
import sys

import torch

import pmi_decode.inputs as inputs
import pmi_decode.processor as processor
import pmi_decode.scores as scores_module
from pmi_decode.cli import main

HEDGES = ["I don't know", "I do not know", "I'm not sure", "I am not sure", "I have no idea",
          "Sorry, I don't know", "I'm sorry, I don't know", "I can't tell", "I cannot tell",
          "The document does not say", "The document doesn't say", "It doesn't say", "It does not say",
          "There is no information"]
if os.environ.get("NO_HEDGES"):  # the check: with no phrase, the patched command writes what it writes unpatched
    HEDGES = []
TRIE: dict = {}
NEUTRAL = [None]  # this step's (rows, vocab) mask of the tokens that continue a hedge
_encode = inputs.encode_dialogue
_call = processor.PMIDecode.__call__
_candidates = scores_module.pmi_candidates
_scores = processor._pmi_scores


def build_trie(tokenizer):
    for phrase in HEDGES:
        for text in {phrase, " " + phrase, phrase.replace("'", "\u2019"), " " + phrase.replace("'", "\u2019")}:
            node = TRIE
            for i in tokenizer.encode(text, add_special_tokens=False):
                node = node.setdefault(i, {})


def capture(tokenizer, document, history, **options):
    if not TRIE:
        build_trie(tokenizer)
    return _encode(tokenizer, document, history, **options)


def continuations(response):
    node = TRIE
    for i in response:
        node = node.get(int(i))
        if node is None:
            return []
    return list(node)


def hedge_call(self, input_ids, scores):
    width = self.__dict__.setdefault("_probe_width", input_ids.shape[1])
    rows = input_ids.shape[0] // 2 if self.paired else input_ids.shape[0]
    mask = torch.zeros(rows, scores.shape[-1], dtype=torch.bool, device=scores.device)
    for r in range(rows):
        nxt = continuations(input_ids[r, width:].tolist())
        if nxt:
            mask[r, nxt] = True
    NEUTRAL[0] = mask if bool(mask.any()) else None
    try:
        return _call(self, input_ids, scores)
    finally:
        NEUTRAL[0] = None


def neutral_candidates(scores, p, plausibility=0.0):
    lp_c, keep = _candidates(scores, p, plausibility)
    mask = NEUTRAL[0]
    if mask is not None and mask.shape == keep.shape:
        keep = keep | (mask & (lp_c > -float("inf")))
    return lp_c, keep


def penalty_scores(scores, lp_u, alpha, p, normalize=False, end_ids=None, plausibility=0.0, candidates=None,
                   pmi_cap=None):
    if lp_u is None or alpha == 0.0:
        return _scores(scores, lp_u, alpha, p, normalize, end_ids, plausibility, candidates, pmi_cap=pmi_cap)
    lp_c, keep = scores_module.pmi_candidates(scores, p, plausibility)
    lp_u = lp_u.to(lp_c.dtype)
    pmi = torch.where(lp_u.abs() < float("inf"), lp_c - lp_u, torch.zeros_like(lp_c))
    if NEUTRAL[0] is not None and NEUTRAL[0].shape == pmi.shape:
        pmi = torch.where(NEUTRAL[0], torch.zeros_like(pmi), pmi)
    out = torch.where(keep, lp_c + alpha * pmi.clamp(max=0.0), torch.full_like(lp_c, -float("inf")))
    if end_ids is not None:
        return scores_module.conditional_end_scores(lp_c, out, end_ids, normalize)
    return torch.log_softmax(out, dim=-1) if normalize else out


def neutral_scores(scores, lp_u, alpha, *args, **kwargs):
    if os.environ.get("SCORE") == "penalty":
        return penalty_scores(scores, lp_u, alpha, *args, **kwargs)
    mask = NEUTRAL[0]
    if mask is not None and lp_u is not None and mask.shape == scores.shape:
        lp_u = torch.where(mask, torch.log_softmax(scores, dim=-1).to(lp_u.dtype), lp_u)
        if len(args) >= 5:  # p, normalize, end_ids, plausibility, candidates: recomputed with the hedge kept
            args = args[:4] + (None,) + args[5:]
        else:
            kwargs["candidates"] = None
    return _scores(scores, lp_u, alpha, *args, **kwargs)


inputs.encode_dialogue = capture
processor.PMIDecode.__call__ = hedge_call
scores_module.pmi_candidates = neutral_candidates
processor._pmi_scores = neutral_scores

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
