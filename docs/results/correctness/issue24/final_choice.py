"""Probe: PMI-Decode beam search, then the returned response chosen among the beams' finished
hypotheses by the conditional model's mean token log-prob (what plain beam search ranks by).

    python docs/results/correctness/issue24/final_choice.py generate --model embedded-gemma \
        --input docs/results/correctness/issue24/abstentions8.jsonl --output abstentions8.final.jsonl

Runs from this commit's library (it patches ``_pmi_sequences`` of pmi_decode.batch.decode, then
runs the command line). On the 8 dialogues where plain decoding abstains with Gemma (7 Normans
and fd-04) it abstained on none (probe_abstentions8_final_choice.log): no abstaining hypothesis
is left among the final beams, so a choice at the end cannot bring one back."""
import sys, torch
import pmi_decode.batch.decode as D

orig = D._pmi_sequences
MODE = {"crit": "mean"}

def _ends(model):
    e = model.generation_config.eos_token_id
    return [e] if isinstance(e, int) else list(e or [])

@torch.no_grad()
def patched(model, inputs, *, generate_kwargs, **kw):
    k = int(generate_kwargs.get("num_beams") or 1)
    if k == 1:
        return orig(model, inputs, generate_kwargs=generate_kwargs, **kw)
    seqs = orig(model, inputs, generate_kwargs=dict(generate_kwargs, num_return_sequences=k), **kw)
    cond = inputs["conditional"]
    plen = cond["input_ids"].shape[1]
    pm = cond["attention_mask"].repeat_interleave(k, 0)
    gen = seqs[:, plen:]
    ends = torch.tensor(_ends(model), device=gen.device)
    is_end = torch.isin(gen, ends)
    after = (is_end.cumsum(1) - is_end.long()) > 0  # tokens after the first end
    gm = (~after).long()
    mask = torch.cat([pm, gm], 1)
    pos = (mask.cumsum(1) - 1).clamp(min=0)
    logits = model(input_ids=seqs, attention_mask=mask, position_ids=pos).logits[:, plen - 1:-1].float()
    lp = torch.log_softmax(logits, -1).gather(-1, gen[..., None])[..., 0]
    tot = (lp * gm).sum(1)
    n = gm.sum(1).clamp(min=1)
    score = tot / n
    B = seqs.shape[0] // k
    pick = score.view(B, k).argmax(1)
    for b in range(B):
        print("   cand", [round(float(x), 3) for x in score.view(B, k)[b]], "pick", int(pick[b]), file=sys.stderr)
    return seqs.view(B, k, -1)[torch.arange(B), pick]

D._pmi_sequences = patched
from pmi_decode.cli import main
sys.exit(main(sys.argv[1:]))
