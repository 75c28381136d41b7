"""Why does PMI-Decode abstain less? Per-token PMI of plain decoding's abstentions.

    python eval/studies/abstention_pmi.py docs/results/correctness/generations/normans_unanswerable.gemma.capped.jsonl \
        --model embedded-gemma --output docs/results/correctness/abstention_pmi.gemma.json

For each record whose ``plain_response`` says the document does not tell
(``pmi_decode.metrics.correctness.abstains``), the conditional PMI of its first tokens,
log P(token | d, h, prefix) - log P(token | h, prefix), under the PMI-Faith scorer's prompt (close
to, not the same as, ``generate``'s), beside the conditional log-probability and what PMI-Decode
wrote instead. A PMI near zero at the first token says the document neither helps nor hurts the
abstention itself; PMI-Decode then loses it to openings the document supports (positive PMI).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from pmi_decode.metrics.correctness import abstains
from pmi_decode.metrics.pmi_faith import PMIFaith


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("generations", help="what pmi-decode generate --compare wrote")
    parser.add_argument("--model", default="embedded", help="the scorer (use the generator)")
    parser.add_argument("--tokens", type=int, default=6, help="first tokens to report")
    parser.add_argument("--output", required=True)
    args = parser.parse_args(argv)
    rows = [json.loads(line) for line in open(args.generations) if line.strip()]
    asked = [r["history"][-1] if r.get("history") else None for r in rows]
    chosen = [r for r, question in zip(rows, asked) if abstains(r["plain_response"], question)]
    scores = PMIFaith(args.model).score([r["document"] for r in chosen], [r["history"] for r in chosen],
                                        [r["plain_response"] for r in chosen], return_tokens=True)
    out = []
    for row, score in zip(chosen, scores):
        k = args.tokens
        out.append({"id": row.get("id"), "plain_response": row["plain_response"], "pmi_response": row["pmi_response"],
                    "tokens": score["tokens"][:k], "token_cpmi": [round(v, 3) for v in score["token_cpmi"][:k]],
                    "token_logprob_dh": [round(v, 3) for v in score["token_logprob_dh"][:k]]})
    first = [o["token_cpmi"][0] for o in out]
    summary = {"records": len(rows), "plain_abstentions": len(out),
               "pmi_abstentions": sum(abstains(r["pmi_response"], question) for r, question in zip(rows, asked)),
               "first_token_cpmi_mean": round(sum(first) / len(first), 3) if first else None}
    Path(args.output).write_text(json.dumps({"summary": summary, "rows": out}, indent=1, ensure_ascii=False))
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
