"""Probe (not in the library): CoCoA's weight (max 1, exponent 0.5) with a ceiling, alpha_t = min(CLIP, w_t).

Weaker than the defaults' fixed 0.25 at every step; where the model reading the document is
decided, or the two distributions agree, close to plain decoding. Runs `pmi-decode` with
AdaptiveAlpha.weights patched, so the files it writes say alpha "cocoa:1:0.5"; the committed
copies were relabelled. Commands (this folder's *.ceil25.jsonl):

    G=docs/results/correctness/generations
    CLIP=0.25 python docs/results/correctness/issue24/probe_ceiling.py generate --input $G/factual.jsonl \
        --output factual.ceil25.jsonl --alpha cocoa:1:0.5            # and --model embedded-gemma
    CLIP=0.25 python docs/results/correctness/issue24/probe_ceiling.py generate --model embedded-gemma \
        --input docs/results/correctness/issue24/abstentions8.jsonl --output abstentions8.gemma.ceil25.jsonl \
        --alpha cocoa:1:0.5
"""
import os
import sys

import pmi_decode.adaptive as adaptive
from pmi_decode.cli import main

CLIP = float(os.environ["CLIP"])
_weights = adaptive.AdaptiveAlpha.weights


def clipped(self, lp_c, lp_u):
    return _weights(self, lp_c, lp_u).clamp(max=CLIP)


adaptive.AdaptiveAlpha.weights = clipped

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
