"""Probe: an abstention as one more candidate of the final choice. Would "I don't know." (or "The
document does not say."), scored by the model reading the document as the final choice scores its
hypotheses (mean token log-prob, end token included), beat the response the defaults returned, and
does its margin tell unanswerable questions from answerable ones?

    python docs/results/correctness/issue24/abstain_candidate.py score embedded-gemma abstain_candidate.gemma.jsonl \
        final_choice/factual.gemma.final.jsonl final_choice/factual_heldout.gemma.final.jsonl \
        final_choice/normans_answerable.gemma.final.jsonl generations/normans_unanswerable.gemma.capped.jsonl
    python docs/results/correctness/issue24/abstain_candidate.py summary abstain_candidate.*.jsonl

(SmolLM2: ``embedded`` over the same sets' SmolLM2 files, final_choice/normans_unanswerable.final.jsonl
last.) Both runs were stopped part-way for time, in the Normans files; the rows written are the
result (abstain_candidate.json). No signal: the margin's AUROC for "unanswerable" is 0.50 with both
generators, and the abstention beats the returned response once in 282 dialogues.
"""
import json
import sys

import torch

PHRASES = ["I don't know.", "The document does not say."]


def final_choice_scorer(model_name):
    """The model, and ``(prompt_ids_of(record), mean_log_prob(prompt_ids, text))`` scoring a response
    as the final choice scores its hypotheses: mean token log-prob, the end token included."""
    from pmi_decode import build_inputs
    from pmi_decode.inputs import encode_response, use_chat_template_for
    from pmi_decode.models import load_model_and_tokenizer

    model, tok = load_model_and_tokenizer(model_name)
    model.eval()
    chat = use_chat_template_for(tok, False, None)
    ends = model.generation_config.eos_token_id
    ends = [ends] if isinstance(ends, int) else list(ends)
    if not chat:  # the plain layout ends a response at its line break (end_at_line_break auto)
        ends += [i for t, i in tok.get_vocab().items() if t in ("\n", "\u010a")]

    def prompt_ids_of(record):
        cond = build_inputs(tok, [record["document"]], [record["history"]], model=model)["conditional"]
        return cond["input_ids"][0][cond["attention_mask"][0].bool()].tolist()

    @torch.no_grad()
    def mean_log_prob(prompt, text):
        ids = encode_response(tok, text, is_encoder_decoder=False, chat_template=chat, add_eos=False)
        lp = model(input_ids=torch.tensor([prompt + ids])).logits[0, len(prompt) - 1:].float().log_softmax(-1)
        total = float(lp[torch.arange(len(ids)), torch.tensor(ids)].sum()) + float(lp[len(ids), ends].max())
        return total / (len(ids) + 1)

    return prompt_ids_of, mean_log_prob


def score_files(model_name, out_path, files):
    prompt_ids_of, mean_log_prob = final_choice_scorer(model_name)
    with open(out_path, "w") as out:
        for path in files:
            for line in open(path):
                r = json.loads(line)
                prompt = prompt_ids_of(r)
                row = {"file": path, "id": r["id"], "answerable": r.get("answerable"),
                       "pick": mean_log_prob(prompt, r["pmi_response"]),
                       "plain": mean_log_prob(prompt, r["plain_response"]) if r.get("plain_response") else None}
                row.update({p: mean_log_prob(prompt, p) for p in PHRASES})
                out.write(json.dumps(row) + "\n")
                out.flush()


def summary(files):
    from sklearn.metrics import roc_auc_score

    result = {}
    for path in files:
        rows = [json.loads(line) for line in open(path)]
        unanswerable = [0 if r["answerable"] else 1 for r in rows]
        for phrase in PHRASES:
            margin = [r[phrase] - r["pick"] for r in rows]
            wins = [r for r in rows if r[phrase] > r["pick"]]
            result[f"{path} | {phrase}"] = {
                "dialogues": len(rows), "unanswerable": sum(unanswerable),
                "auroc_unanswerable_by_margin": round(roc_auc_score(unanswerable, margin), 3),
                "beats_pick_answerable": sum(bool(r["answerable"]) for r in wins),
                "beats_pick_unanswerable": sum(not r["answerable"] for r in wins)}
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    if sys.argv[1] == "score":
        score_files(sys.argv[2], sys.argv[3], sys.argv[4:])
    else:
        summary(sys.argv[2:])
