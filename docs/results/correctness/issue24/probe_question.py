"""Probe (not in the library): contrast against a neutral question instead of against no document.

PMI-Decode contrasts log P(v | d, h) with log P(v | h): every token the document makes likelier
gains, the one that answers and the one from the next sentence alike. This probe keeps the
document on both sides and removes the question instead: the other side is the same document and
history with the last user turn replaced by NEUTRAL ("Tell me about this."), so the term is

    log P(v | d, h, question) - log P(v | d, h, neutral question)

and a token gains where *the question* makes it likelier given the document: the alpaca price
when the question names the alpaca yarn, not the first price on the page. It runs `pmi-decode`
with `pmi_decode.inputs.encode_dialogue` patched to build that other side; every other setting
(the cap, plausibility, guards, beams) is the command's. The files it writes say nothing of the
patch; relabel the copies you commit. Commands (this folder's *.question.jsonl):

    python docs/results/correctness/issue24/probe_question.py generate \
        --input tests/fixtures/correctness/factual_dialogues_heldout.jsonl \
        --output factual_heldout.question.jsonl          # and --model embedded-gemma
"""
import os
import sys

import pmi_decode.inputs as inputs
from pmi_decode.cli import main

NEUTRAL = os.environ.get("NEUTRAL", "Tell me about this.")
_encode = inputs.encode_dialogue


def question_contrast(tokenizer, document, history, **options):
    encoded = _encode(tokenizer, document, history, **options)
    if history:
        neutral = _encode(tokenizer, document, list(history[:-1]) + [NEUTRAL], **options)
        encoded.unconditional = neutral.conditional
    return encoded


inputs.encode_dialogue = question_contrast

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
