"""The first decoding step of a dialogue of our factual set: the conditional and document-free
log-probs of the conditional top 12 tokens, their PMI and the default score (alpha 0.25, cap 2).

    python docs/results/correctness/issue24/first_token.py embedded-gemma fd-29 > first_token_fd29.txt
"""
import json, sys, torch
from pmi_decode.models import load_model_and_tokenizer
from pmi_decode import build_inputs
model, tok = load_model_and_tokenizer(sys.argv[1])
ids = sys.argv[2].split(",")
recs = {json.loads(l)["id"]: json.loads(l) for l in open("docs/results/correctness/generations/factual.jsonl")}
for i in ids:
    r = recs[i]
    inp = build_inputs(tok, [r["document"]], [r["history"]], model=model)
    with torch.no_grad():
        lc = model(**inp["conditional"]).logits[0, -1].float().log_softmax(-1)
        lu = model(**inp["unconditional"]).logits[0, -1].float().log_softmax(-1)
    top = lc.topk(12)
    print(i, r["history"][-1])
    for v, t in zip(top.values, top.indices):
        pmi = float(lc[t] - lu[t])
        print(f"   {tok.decode([int(t)])!r:16} lp_c {float(v):6.2f} lp_u {float(lu[t]):6.2f} pmi {pmi:5.2f} score {0.75*float(v)+0.25*min(pmi,2):6.2f}")
