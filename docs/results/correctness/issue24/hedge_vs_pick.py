"""Probe: where plain decoding and the defaults part on one of issue 24's bars (one hedges and the
other answers, or one matches the reference answer and the other does not), which response does the
model reading the document prefer? Each response is scored as the final choice scores its hypotheses (mean token
log-prob, end token included, `abstain_candidate.py`'s scorer) and as plain beam search ranks its own
(the same mean: length penalty 1). If the defaults' answer scores higher than plain decoding's hedge,
plain's hedge is a hypothesis its own search ranked first only because it never found the answer;
where the defaults' wrong answer scores higher than plain decoding's right one, the generator itself
prefers the wrong answer.

    python docs/results/correctness/issue24/hedge_vs_pick.py embedded-gemma hedge_vs_pick.gemma.jsonl \
        generations/normans_unanswerable.gemma.capped.jsonl:final_choice/normans_unanswerable.gemma.final.jsonl \
        generations/normans_answerable.gemma.capped.jsonl:final_choice/normans_answerable.gemma.final.jsonl \
        generations/factual.gemma.capped.jsonl:final_choice/factual.gemma.final.jsonl \
        generations/factual_heldout.gemma.capped.jsonl:final_choice/factual_heldout.gemma.final.jsonl
    python docs/results/correctness/issue24/hedge_vs_pick.py summary hedge_vs_pick.gemma.jsonl

(SmolLM2: ``embedded`` and the same files without ``.gemma``, into hedge_vs_pick.smollm2.jsonl.) The
summary is written beside the rows as ``.json``.

(paths relative to docs/results/correctness; each argument pairs the file holding plain decoding's
response with the file holding the defaults'.)
"""
import json
import sys


def main():
    if sys.argv[1] == "summary":
        return summary(sys.argv[2])
    from abstain_candidate import final_choice_scorer  # this folder's probe: one scorer for both

    from pmi_decode.metrics.correctness import abstains, answer_match

    prompt_ids_of, mean_log_prob = final_choice_scorer(sys.argv[1])
    with open(sys.argv[2], "w") as out:
        for pair in sys.argv[3:]:
            plain_path, pick_path = pair.split(":")
            plain = {r["id"]: r["plain_response"] for r in map(json.loads, open(plain_path))}
            for line in open(pick_path):
                r = json.loads(line)
                question = r["history"][-1]
                p_hedges, d_hedges = abstains(plain[r["id"]], question), abstains(r["pmi_response"], question)
                answers = r.get("answers") or []
                p_match = answer_match(plain[r["id"]], answers) if answers else None
                d_match = answer_match(r["pmi_response"], answers) if answers else None
                if p_hedges == d_hedges and p_match == d_match:
                    continue
                prompt = prompt_ids_of(r)
                row = {"file": pick_path, "id": r["id"], "answerable": r.get("answerable", True),
                       "plain_hedges": p_hedges, "defaults_hedge": d_hedges,
                       "plain_match": p_match, "defaults_match": d_match,
                       "plain": plain[r["id"]], "defaults": r["pmi_response"],
                       "plain_score": mean_log_prob(prompt, plain[r["id"]]),
                       "defaults_score": mean_log_prob(prompt, r["pmi_response"])}
                out.write(json.dumps(row) + "\n")
                out.flush()


def summary(path):
    rows = [json.loads(line) for line in open(path)]
    result = {}
    groups = {
        "plain hedges, the defaults do not": lambda r: r["plain_hedges"] and not r["defaults_hedge"],
        "the defaults hedge, plain does not": lambda r: r["defaults_hedge"] and not r["plain_hedges"],
        "plain matches the answer, the defaults do not": lambda r: r["plain_match"] == 1 and r["defaults_match"] == 0,
        "the defaults match the answer, plain does not": lambda r: r["defaults_match"] == 1 and r["plain_match"] == 0,
    }
    for name, keep in groups.items():
        sub = [r for r in rows if keep(r)]
        result[name] = {
            "dialogues": len(sub),
            "by file": {f: sum(r["file"] == f for r in sub) for f in sorted({r["file"] for r in sub})},
            "unanswerable": sum(not r["answerable"] for r in sub),
            "model prefers the defaults' response": sum(r["defaults_score"] > r["plain_score"] for r in sub),
            "of the unanswerable, model prefers the defaults' response":
                sum(r["defaults_score"] > r["plain_score"] for r in sub if not r["answerable"]),
            "mean score, plain": round(sum(r["plain_score"] for r in sub) / max(len(sub), 1), 3),
            "mean score, defaults": round(sum(r["defaults_score"] for r in sub) / max(len(sub), 1), 3)}
    print(json.dumps(result, indent=1))
    with open(path.replace(".jsonl", ".json"), "w") as out:
        json.dump(result, out, indent=1)


if __name__ == "__main__":
    main()
