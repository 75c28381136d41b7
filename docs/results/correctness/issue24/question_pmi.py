"""Is the question answerable from the document? A signal tried for issue 24 (abstention): per question token,
PMI = log P(q_i | d, h, q<i) - log P(q_i | h, q<i), and the conditional log-prob alone; AUROC for "unanswerable".

    G=docs/results/correctness/generations
    python docs/results/correctness/issue24/question_pmi.py embedded-gemma $G/normans_answerable.jsonl $G/normans_unanswerable.jsonl
"""
import json, sys, math
import torch
from pmi_decode.models import load_model_and_tokenizer
from pmi_decode.inputs import encode_dialogue, DialogueFormat, _ids
from sklearn.metrics import roc_auc_score

model_name = sys.argv[1]; files = sys.argv[2:]
model, tok = load_model_and_tokenizer(model_name)
model.eval(); torch.set_num_threads(1)
fmt = DialogueFormat()
rows = []
def token_lp(ids):
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].float()
    lp = torch.log_softmax(logits[:-1], -1)
    return lp.gather(-1, torch.tensor(ids[1:]).unsqueeze(-1)).squeeze(-1)
for f in files:
    for line in open(f):
        r = json.loads(line)
        enc = encode_dialogue(tok, r["document"], r["history"], is_encoder_decoder=False, chat_template=False)
        q = fmt.user_prefix + r["history"][-1] + fmt.separator
        nq = len(_ids(tok, q)); nr = len(_ids(tok, fmt.response_prefix))
        nq_prefix = len(_ids(tok, fmt.user_prefix))
        c, u = enc.conditional, enc.unconditional
        assert c[-(nq + nr):] == u[-(nq + nr):]
        lc = token_lp(c)[-(nq + nr):][nq_prefix:nq]   # the question's own tokens (prefix "User: " dropped)
        lu = token_lp(u)[-(nq + nr):][nq_prefix:nq]
        pmi = (lc - lu)
        rows.append(dict(id=r["id"], answerable=bool(r.get("answerable", True)), min=float(pmi.min()),
                         mean=float(pmi.mean()), neg=float(pmi.clamp(max=0).sum()), minc=float(lc.min()),
                         meanc=float(lc.mean())))
y = [0 if r["answerable"] else 1 for r in rows]  # positive = unanswerable
for key in ["min", "mean", "neg", "minc", "meanc"]:
    s = [-r[key] for r in rows]  # lower PMI / log-prob -> more likely unanswerable
    print(f"{model_name} {key}: AUROC(unanswerable) {roc_auc_score(y, s):.3f}")
json.dump(rows, open(f"question_pmi.{model_name}.rows.json", "w"))  # question_pmi.embedded-gemma.json gathers both sets
