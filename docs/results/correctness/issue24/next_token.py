"""The next token after a response prefix, for one dialogue: the conditional model's top 6 tokens
with their log-probs and PMI (conditional minus document-free log-prob).

    python docs/results/correctness/issue24/next_token.py embedded-gemma \
        tests/fixtures/correctness/factual_dialogues_heldout.jsonl fh-33 " The sale price of the alpaca blend yarn at Woolly Bramble is "

Why Gemma's defaults give another item's value on fh-02, fh-06 and fh-33 (section 14's last part):
``next_token_fh.txt`` holds the runs with the prefixes " " (the space Gemma writes before digits),
" $", and fh-33's restated question.
"""
import json
import sys

import torch

from pmi_decode import build_inputs
from pmi_decode.models import load_model_and_tokenizer

model, tok = load_model_and_tokenizer(sys.argv[1])
records = {json.loads(line)["id"]: json.loads(line) for line in open(sys.argv[2])}
record, prefix = records[sys.argv[3]], sys.argv[4]
inputs = build_inputs(tok, [record["document"]], [record["history"]], model=model)
extra = tok(prefix, add_special_tokens=False, return_tensors="pt").input_ids
with torch.no_grad():
    lc = model(input_ids=torch.cat([inputs["conditional"]["input_ids"], extra], 1)).logits[0, -1].float().log_softmax(-1)
    lu = model(input_ids=torch.cat([inputs["unconditional"]["input_ids"], extra], 1)).logits[0, -1].float().log_softmax(-1)
top = lc.topk(6)
print(sys.argv[3], repr(prefix), record["history"][-1])
for value, token in zip(top.values, top.indices):
    print(f"   {tok.decode([int(token)])!r:10} lp_c {float(value):6.2f}  pmi {float(lc[token] - lu[token]):5.2f}")
