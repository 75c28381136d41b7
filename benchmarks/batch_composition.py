"""Does a record's decoded text depend on the batch it is decoded in? (Why shards are whole batches.)

    python benchmarks/batch_composition.py

Decodes the same dialogues with a tiny random Llama (float32) at batch size 1 and 4, beam search
and beam sampling, plain and PMI-Decode, and counts the dialogues whose text differs.
"""

import json
from pathlib import Path

import torch

from pmi_decode.batch.decode import decode_records
from pmi_decode.testing import mixed_length_records, tiny_model, tiny_tokenizer

ROOT = Path(__file__).resolve().parents[1]


def main():
    model, tokenizer = tiny_model("llama", dtype=torch.float32), tiny_tokenizer("llama")
    records = mixed_length_records(12)
    result = {"dialogues": len(records), "model": "tiny random llama, float32", "num_beams": 2, "max_new_tokens": 8}
    for name, sample in (("beam_search", False), ("beam_sampling", True)):
        runs = {}
        for batch_size in (1, 4):
            runs[batch_size] = {r["id"]: r for r in decode_records(
                records, model, tokenizer, num_beams=2, max_new_tokens=8, batch_size=batch_size, compare=True,
                progress=False, do_sample=sample)}
        result[name] = {field: sum(runs[1][k][field] != runs[4][k][field] for k in runs[1])
                        for field in ("pmi_response", "plain_response")}
    out = ROOT / "benchmarks" / "results" / "real_lengths" / "batch_composition.json"
    out.write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
