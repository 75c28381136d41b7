import json, sys, math, torch
from pmi_decode.models import load_model_and_tokenizer
from pmi_decode.inputs import build_inputs
from pmi_decode.adaptive import jensen_shannon_bits
model, tok = load_model_and_tokenizer(sys.argv[1])
out = []
for f in sys.argv[3:]:
    recs = [json.loads(l) for l in open(f)]
    for r in recs:
        inp = build_inputs(tok, [r["document"]], [r["history"]], model=model, warn_truncation=False)
        with torch.no_grad():
            lc = torch.log_softmax(model(**inp["conditional"]).logits[0, -1].float(), -1)
            lu = torch.log_softmax(model(**inp["unconditional"]).logits[0, -1].float(), -1)
        pc = lc.exp()
        pmi = (lc - lu).clamp(max=2)
        top = pc.topk(5)
        out.append(dict(id=r["id"], file=f, answerable=r.get("answerable", True),
            jsd=float(jensen_shannon_bits(lc[None], lu[None])[0]), kl=float((pc*(lc-lu)).sum()),
            H_c=float(-(pc*lc).sum()), H_u=float(-(lu.exp()*lu).sum()),
            e_cpmi=float((pc*pmi).sum()), top=[(tok.decode([int(i)]), round(float(p),3), round(float(pmi[i]),2)) for p,i in zip(top.values, top.indices)]))
json.dump(out, open(sys.argv[2], "w"))
from statistics import mean
def auroc(xs, ys):
    pos=[x for x,y in zip(xs,ys) if y]; neg=[x for x,y in zip(xs,ys) if not y]
    return sum((a>b)+0.5*(a==b) for a in pos for b in neg)/len(pos)/len(neg)
for k in ["jsd","kl","H_c","H_u","e_cpmi"]:
    for f in sys.argv[3:]:
        rs=[o for o in out if o["file"]==f]
        if len({o['answerable'] for o in rs})<2: continue
        print(f, k, "auroc(answerable high)", round(auroc([o[k] for o in rs],[o["answerable"] for o in rs]),3),
              "mean ans", round(mean(o[k] for o in rs if o["answerable"]),3), "unans", round(mean(o[k] for o in rs if not o["answerable"]),3))
