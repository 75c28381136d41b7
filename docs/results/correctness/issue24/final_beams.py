"""Probe: the defaults' beam search returning every finished hypothesis, in the order the final
choice ranks them (it patches ``_pmi_sequences`` of pmi_decode.batch.decode, then runs the command
line; the first of each dialogue is what the defaults return).

    DUMP=docs/results/correctness/issue24/final_beams_fh5.gemma.jsonl \
        python docs/results/correctness/issue24/final_beams.py generate --model embedded-gemma \
        --input docs/results/correctness/issue24/fh5.jsonl --output /tmp/fh5.out.jsonl

``fh5.jsonl``: the five answers of the second factual set that Gemma's defaults lose (section 11).
Each line of the dump is a dialogue's prompt tail and its hypotheses (section 15)."""
import json
import os
import sys

import transformers

import pmi_decode.batch.decode as decode

ORIGINAL = decode._pmi_sequences
DUMP = open(os.environ["DUMP"], "a")
TOKENIZER = {}


def every_hypothesis(model, inputs, *, generate_kwargs, **kwargs):
    beams = int(generate_kwargs.get("num_beams") or 1)
    seqs = ORIGINAL(model, inputs, generate_kwargs=dict(generate_kwargs, num_return_sequences=beams), **kwargs)
    width = inputs["conditional"]["input_ids"].shape[1]
    rows = seqs.shape[0] // beams
    tok = TOKENIZER["loaded"]
    for row in range(rows):
        prompt = tok.decode(inputs["conditional"]["input_ids"][row], skip_special_tokens=True)[-160:]
        hyps = [tok.decode(s[width:], skip_special_tokens=True) for s in seqs.view(rows, beams, -1)[row]]
        DUMP.write(json.dumps({"prompt": prompt, "hyps": hyps}) + "\n")
    DUMP.flush()
    return seqs.view(rows, beams, -1)[:, 0]


def remember_tokenizer(*args, _load=transformers.AutoTokenizer.from_pretrained, **kwargs):
    TOKENIZER["loaded"] = _load(*args, **kwargs)
    return TOKENIZER["loaded"]


decode._pmi_sequences = every_hypothesis
transformers.AutoTokenizer.from_pretrained = remember_tokenizer
from pmi_decode.cli import main  # noqa: E402

sys.exit(main(sys.argv[1:]))
