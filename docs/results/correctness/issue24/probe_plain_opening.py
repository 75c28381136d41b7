"""Probe (not in the library): the response's first OPENING tokens scored without the PMI term.

A small model often picks the right fact only after restating the question ("The sale price of the
alpaca blend yarn is 8.75 euros"); PMI gives the restated words nothing (the question is in the
history on both sides) and every document number up to the cap, so the response jumps straight to
a number, and the wrong one ("6.50 euros"). Here the conditional model alone scores the first
OPENING response tokens (alpha 0 there; the nucleus still applies), and the defaults' score takes
over from then on. Runs `pmi-decode` with the processor's score function patched; the files it
writes say nothing of the patch. Commands (this folder's *.plainopen{K}.jsonl):

    OPENING=1 python docs/results/correctness/issue24/probe_plain_opening.py generate \
        --model embedded-gemma --input IN.jsonl --output OUT.jsonl
"""
import os
import sys

import pmi_decode.processor as processor
from pmi_decode.cli import main

OPENING = int(os.environ["OPENING"])
STEP = [0]
_call = processor.PMIDecode.__call__
_scores = processor._pmi_scores


def counting_call(self, input_ids, scores):
    # a new PMIDecode per pmi_generate call: its first call sees the prompt's width
    width = self.__dict__.setdefault("_probe_width", input_ids.shape[1])
    STEP[0] = input_ids.shape[1] - width
    return _call(self, input_ids, scores)


def opening_scores(scores, lp_u, alpha, *args, **kwargs):
    if STEP[0] < OPENING:
        alpha = 0.0  # (and no precomputed candidates: they carry the plausibility cut of the PMI term)
        if len(args) >= 5:  # p, normalize, end_ids, plausibility, candidates
            args = args[:4] + (None,) + args[5:]
        else:
            kwargs["candidates"] = None
    return _scores(scores, lp_u, alpha, *args, **kwargs)


processor.PMIDecode.__call__ = counting_call
processor._pmi_scores = opening_scores

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
