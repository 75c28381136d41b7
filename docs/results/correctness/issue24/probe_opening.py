"""Probe (not in the library): CoCoA's weight only at the response's opening, the fixed weight after.

alpha_t = min(CEILING, w_t) (CoCoA's weight, max 1, exponent 0.5) for the first OPENING response
tokens, CEILING (the defaults' 0.25) from then on. The idea: the opening decides which fact the
response states, where the document and the model's own knowledge rarely conflict and a full PMI
push makes the response start reciting the document; after it, the fixed weight keeps copied facts
intact. Runs `pmi-decode` with PMIDecode.__call__ and AdaptiveAlpha.weights patched, so the files
it writes say alpha "cocoa:1:0.5"; relabel the copies you commit. Commands (this folder's
*.open4.jsonl):

    G=docs/results/correctness/generations
    OPENING=4 CEILING=0.25 python docs/results/correctness/issue24/probe_opening.py generate \
        --input $G/factual.jsonl --output factual.open4.jsonl --alpha cocoa:1:0.5   # and --model embedded-gemma
"""
import os
import sys

import pmi_decode.adaptive as adaptive
import pmi_decode.processor as processor
from pmi_decode.cli import main

OPENING = int(os.environ["OPENING"])
CEILING = float(os.environ["CEILING"])
STEP = [0]
_call = processor.PMIDecode.__call__
_weights = adaptive.AdaptiveAlpha.weights


def counting_call(self, input_ids, scores):
    # a new PMIDecode per pmi_generate call: its first call sees the prompt's width
    width = self.__dict__.setdefault("_probe_width", input_ids.shape[1])
    STEP[0] = input_ids.shape[1] - width
    return _call(self, input_ids, scores)


def opening_weights(self, lp_c, lp_u):
    if STEP[0] < OPENING:
        return _weights(self, lp_c, lp_u).clamp(max=CEILING)
    return lp_c.new_full((lp_c.shape[0], 1), CEILING)


processor.PMIDecode.__call__ = counting_call
adaptive.AdaptiveAlpha.weights = opening_weights

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
