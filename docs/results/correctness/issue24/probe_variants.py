"""Probe variants of the PMI step score on a small file; loads the model once.

Variants: base, open<k> (the first k tokens by the conditional model), cap<x>, center,
opencenter / opencenter2 (centred on the expected PMI), openmax<k> (centred on the largest PMI of
the candidates, so no hypothesis gains from the PMI term; tried on the 8 abstentions, 3 kept):

    G=docs/results/correctness/generations
    python docs/results/correctness/issue24/probe_variants.py \
        --input docs/results/correctness/issue24/abstentions8.jsonl --variants openmax \
        --plain $G/normans_unanswerable.gemma.capped.jsonl,$G/factual.gemma.capped.jsonl \
        > probe_abstentions8_openmax.log

(``openmax`` runs on this commit's library too; ``center`` and ``opencenter2`` need 0e5a623.)"""
import json, math, sys, time, argparse
import torch
import pmi_decode.processor as P
import pmi_decode.scores as S
from pmi_decode.decode_config import DecodeConfig
from pmi_decode.batch.decode import decode_records
from pmi_decode.models import load_model_and_tokenizer
from pmi_decode.metrics.correctness import abstains, answer_match, answer_recall

VAR = {"name": "base"}
orig_scores = S.pmi_scores
orig_call = P.PMIDecode.__call__

def call(self, input_ids, scores):
    if getattr(self, "_w0", None) is None or input_ids.shape[1] < self._wlast:
        self._w0 = input_ids.shape[1]
    self._wlast = input_ids.shape[1]
    VAR["step"] = input_ids.shape[1] - self._w0
    return orig_call(self, input_ids, scores)
P.PMIDecode.__call__ = call

def variant_scores(scores, lp_u, alpha, p, normalize=False, end_ids=None, plausibility=0.0, candidates=None, pmi_cap=None, center=False):
    name = VAR["name"]
    if name == "opencenter2":
        a = 0.0 if VAR["step"] < 1 else alpha
        return orig_scores(scores, lp_u, a, p, normalize, end_ids, plausibility, candidates, pmi_cap=pmi_cap, center=True)
    if name.startswith("openmax") and lp_u is not None:
        k = int(name[7:] or 1)
        if VAR["step"] < k:
            return orig_scores(scores, lp_u, 0.0, p, normalize, end_ids, plausibility, candidates, pmi_cap=pmi_cap)
        lp_c, keep = S.pmi_candidates(scores, p, plausibility)
        known = torch.isfinite(lp_u)
        pmi = (lp_c - torch.where(known, lp_u, torch.zeros_like(lp_u)))
        if pmi_cap is not None: pmi = pmi.clamp(max=pmi_cap)
        m = torch.where(keep & known, pmi, torch.full_like(pmi, -math.inf)).amax(-1, keepdim=True)
        m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
        sc = orig_scores(scores, lp_u, alpha, p, normalize, None, plausibility, candidates, pmi_cap=pmi_cap)
        sc = sc - alpha * m
        if end_ids is not None:
            return S.conditional_end_scores(lp_c, sc, end_ids, normalize)
        return sc
    if name == "base" or lp_u is None:
        return orig_scores(scores, lp_u, alpha, p, normalize, end_ids, plausibility, candidates, pmi_cap=pmi_cap)
    if name.startswith("open") and name[4:].isdigit() or name == "open":
        k = int(name[4:] or 1)
        if VAR["step"] < k:
            return orig_scores(scores, lp_u, 0.0, p, normalize, end_ids, plausibility, candidates, pmi_cap=pmi_cap)
        return orig_scores(scores, lp_u, alpha, p, normalize, end_ids, plausibility, candidates, pmi_cap=pmi_cap)
    if name.startswith("cap"):
        return orig_scores(scores, lp_u, alpha, p, normalize, end_ids, plausibility, candidates, pmi_cap=float(name[3:]))
    if name.startswith("opencenter"):
        if VAR["step"] < 1:
            return orig_scores(scores, lp_u, 0.0, p, normalize, end_ids, plausibility, candidates, pmi_cap=pmi_cap)
        name = "center"
    if name.startswith("center"):
        # per-row: subtract alpha * E_{cand ~ P_c}[capped pmi], so rows gain nothing on average from the doc
        lp_c, keep = S.pmi_candidates(scores, p, plausibility)
        known = torch.isfinite(lp_u)
        pmi = (lp_c - torch.where(known, lp_u, torch.zeros_like(lp_u)))
        if pmi_cap is not None: pmi = pmi.clamp(max=pmi_cap)
        w = torch.where(keep & known, lp_c, torch.full_like(lp_c, -math.inf)).softmax(-1)
        m = (w * torch.where(keep & known, pmi, torch.zeros_like(pmi))).sum(-1, keepdim=True)
        sc = orig_scores(scores, lp_u, alpha, p, normalize, None, plausibility, candidates, pmi_cap=pmi_cap)
        sc = sc - alpha * m
        if end_ids is not None:
            return S.conditional_end_scores(lp_c, sc, end_ids, normalize)
        return sc
    raise ValueError(name)
P._pmi_scores = variant_scores

ap = argparse.ArgumentParser()
ap.add_argument("--model", default="embedded-gemma")
ap.add_argument("--input"); ap.add_argument("--variants", default="base")
ap.add_argument("--plain", help="jsonl with plain_response per id")
ap.add_argument("--extra", default="{}")
ap.add_argument("--out")
a = ap.parse_args()
recs = [json.loads(l) for l in open(a.input)]
plain = {}
if a.plain:
    for f in a.plain.split(","):
        for l in open(f):
            r = json.loads(l); plain[str(r["id"])] = r["plain_response"]
model, tok = load_model_and_tokenizer(a.model)
for v in a.variants.split(","):
    VAR["name"] = v.split("+")[0]
    extra = json.loads(a.extra)
    if "+norm" in v: extra["normalize_scores"] = True
    cfg = DecodeConfig.cli_defaults().replace(**extra)
    t = time.time()
    outs = list(decode_records(recs, model, tok, cfg, progress=False))
    ab = m = rc = n = 0
    rows = []
    for o in outs:
        r = o["pmi_response"]
        if o.get("answerable") is False:
            ab += abstains(r)
        elif o.get("answers"):
            n += 1; m += answer_match(r, o["answers"]); rc += answer_recall(r, o["answers"])
        rows.append(o)
    print(f"== {v}: {time.time()-t:.0f}s abstains {ab}/{sum(o.get('answerable') is False for o in outs)} "
          f"match {m}/{n} recall {rc:.2f}", flush=True)
    for o in outs:
        pl = plain.get(str(o["id"]), "")
        print(f"  {o['id']}: {o['pmi_response'][:110]!r}" + (f"\n     plain: {pl[:110]!r}" if pl else ""))
    if a.out:
        with open(f"{a.out}.{v}.jsonl", "w") as f:
            for o in outs:
                if str(o["id"]) in plain: o["plain_response"] = plain[str(o["id"])]
                f.write(json.dumps(o) + "\n")
