"""Table building: response sets from generated records, scoring, normalisation bounds, markdown."""

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import sacrebleu
from tiny_models import DIALOGUES, tiny_model, tiny_tokenizer

from pmi_decode.metrics.pmi_faith import PMIFaith
from pmi_decode.experiments.report import (
    ResponseSet,
    normalise,
    pmi_bounds,
    response_sets_from_records,
    score_files,
    score_response_set,
    summarise,
    table4_markdown,
    table5_markdown,
)

ROOT = Path(__file__).resolve().parents[1]


class KeywordChecker:
    def count_errors(self, texts):
        return [t.split().count("bad") for t in texts]


def generated_records():
    golds = ["It is in Paris and was built in 1889.", "Yes, Kind of Blue from 1959.", "The Beatles from Liverpool."]
    pmi = ["The tower was built in 1889 in Paris.", "Kind of Blue bad record.", "The Beatles formed in 1960."]
    plain = ["I like Paris.", "Yes I do.", "bad bad band"]
    settings = {"alpha": 0.5, "p": 0.9, "num_beams": 4, "do_sample": False, "max_new_tokens": 20, "seed": 0}
    return [
        {"id": f"d{i}", "document": d, "history": h, "response": g, "pmi_response": r, "plain_response": q,
         "settings": settings}
        for i, ((d, h), g, r, q) in enumerate(zip(DIALOGUES, golds, pmi, plain))
    ]


def test_response_sets_from_generated_records():
    sets = response_sets_from_records(generated_records())
    assert [(s.method, s.objective) for s in sets] == [
        ("beam search", "PMI-Decode (alpha=0.5, p=0.9)"),
        ("beam search", "likelihood"),  # beam search has no nucleus; plain sampling samples PMI-Decode's
    ]
    sampled = [dict(r, settings=dict(r["settings"], do_sample=True, num_beams=1)) for r in generated_records()]
    assert [s.objective for s in response_sets_from_records(sampled)][1] == "likelihood (top-p 0.9)"
    # runs that differ in a setting that changes the scores are two rows, not one pooled row
    capped = [dict(r, id=r["id"] + "c", settings=dict(r["settings"], pmi_cap=2.0, plausibility=0.1))
              for r in generated_records()]
    objectives = [s.objective for s in response_sets_from_records(generated_records() + capped)]
    assert "PMI-Decode (alpha=0.5, p=0.9, cap=2, plausibility=0.1)" in objectives and len(objectives) == 3
    assert sets[0].responses[1] == "Kind of Blue bad record." and sets[1].responses[2] == "bad bad band"
    assert sets[0].golds[0] == "It is in Paris and was built in 1889."
    with pytest.raises(ValueError, match="record 1 .*neither"):
        response_sets_from_records([{"id": "x", "document": "d", "history": ["h"], "response": "g"}])


def test_bounds_and_normalisation():
    a = [{"cpmi_sum": -2.0}, {"cpmi_sum": 2.0}]
    b = [{"cpmi_sum": 6.0}]
    bounds = pmi_bounds([a, b])
    assert (bounds["low"], bounds["high"], bounds["source"]) == (-2.0, 6.0, "table")
    assert normalise([-2.0, 2.0, 6.0], bounds) == [0.0, 0.5, 1.0]
    fixed = pmi_bounds([a, b], fixed=(0.0, 4.0))
    assert fixed["source"] == "fixed"
    assert normalise([-2.0, 2.0, 6.0], fixed) == [0.0, 0.5, 1.0]  # clipped outside the fixed bounds
    with pytest.raises(ValueError, match="low < high"):
        pmi_bounds([a], fixed=(1.0, 1.0))


class FixedPMI:
    """Stand-in scorer with known PMI values (the scorer itself is tested in test_pmi_faith.py)."""

    def __init__(self, values):
        self.values = values

    def score(self, documents, histories, responses, **kwargs):
        return [{"cpmi_sum": self.values[r], "cpmi_mean": self.values[r] / 2, "num_tokens": 2} for r in responses]


def test_summaries_and_table4():
    sets = response_sets_from_records(generated_records())
    values = {r: float(i) for i, r in enumerate(sets[0].responses + sets[1].responses)}  # 0..5

    def failing_q2(documents, histories, responses):
        raise RuntimeError("Q² question generation model could not be loaded (offline)")

    for s in sets:
        score_response_set(s, pmi_scorer=FixedPMI(values), grammar_checker=KeywordChecker(), q2=failing_q2)
    summaries, bounds = summarise(sets)
    assert (bounds["low"], bounds["high"]) == (0.0, 5.0)
    pmi_row, plain_row = summaries
    assert pmi_row["pmi_faith"] == pytest.approx(1.0)  # values 0, 1, 2
    assert pmi_row["pmi_faith_norm"] == pytest.approx(1.0 / 5)
    assert plain_row["pmi_faith_norm"] == pytest.approx(4.0 / 5)
    assert pmi_row["grammar_error_rate"] == pytest.approx(1 / 3)
    assert plain_row["grammar_error_rate"] == pytest.approx(1 / 3)
    expected_bleu = sacrebleu.corpus_bleu(sets[0].responses, [sets[0].golds]).score
    assert pmi_row["bleu"] == pytest.approx(expected_bleu)
    assert 0 < pmi_row["rouge_l"] <= 1 and pmi_row["rouge_l"] > plain_row["rouge_l"]
    assert pmi_row["q2"] is None and "could not be loaded" in pmi_row["notes"]["q2"]

    table = table4_markdown(summaries, bounds, scorer="tiny")
    lines = table.splitlines()
    assert lines[0].startswith("| Decoding | Objective | n | PMI-F |")
    assert "| beam search | PMI-Decode (alpha=0.5, p=0.9) | 3 | 0.200 |" in table
    assert "| n/a |" in table  # Q² column
    assert "low = 0.000 and high = 5.000" in table and "all responses in this table" in table
    assert "Q²: unavailable" in table


def test_table5_grid():
    summaries = [
        {"method": "beam search", "alpha": a, "p": p, "pmi_faith_norm": a * p, "rouge_l": 0.4, "grammar_error_rate": a}
        for a in (0.0, 1.0) for p in (0.6, 1.0)
    ]
    table = table5_markdown(summaries, {"low": 0.0, "high": 1.0, "source": "fixed", "statistic": "cpmi_sum"})
    assert "| alpha \\ p | 0.6 | 1 |" in table
    assert "| 1 | 0.60 / 0.400 / 100% | 1.00 / 0.400 / 100% |" in table
    assert "fixed bounds" in table


def test_real_tiny_scorer_and_score_script(tmp_path):
    path = tmp_path / "gen.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in generated_records()))
    scorer = PMIFaith(tiny_model("llama", seed=1), tiny_tokenizer("llama"))
    result = score_files([path], scorer_model=scorer, grammar_checker=KeywordChecker(), q2=False, progress=False)
    direct = scorer.score([d for d, _ in DIALOGUES], [h for _, h in DIALOGUES],
                          [r["pmi_response"] for r in generated_records()])
    raw = [r["cpmi_sum"] for r in result["sets"][0].scores]
    assert raw == pytest.approx([d["cpmi_sum"] for d in direct])
    assert all(math.isfinite(v) for v in raw)
    assert "Q²: not requested" in result["markdown"]

    # The script end to end (no PMI-Faith, so no model is loaded; Harper checks grammar).
    pytest.importorskip("harper")
    out = tmp_path / "table.md"
    proc = subprocess.run([sys.executable, str(ROOT / "eval" / "score.py"), str(path), "--scorer-model", "none",
                           "--no-q2", "--output", str(out)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert out.read_text().startswith("| Decoding | Objective |")
    assert "PMI-F: not computed" in proc.stdout
    bad = subprocess.run([sys.executable, str(ROOT / "eval" / "score.py"), str(tmp_path / "missing.jsonl")],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode != 0 and "input file not found" in bad.stderr


def test_empty_response_scores_zero_pmi_faith():
    """A decoder that stops at once gives an empty response: PMI-Faith 0 over 0 tokens, not a crash."""
    scorer = PMIFaith(tiny_model("llama", seed=1), tiny_tokenizer("llama"))
    docs, hists = [d for d, _ in DIALOGUES], [h for _, h in DIALOGUES]
    rs = ResponseSet("beam search", "PMI", ["a", "b", "c"], docs, hists, ["Built in 1889.", "  ", "Yes."])
    rows = score_response_set(rs, pmi_scorer=scorer, grammar_checker=KeywordChecker()).scores
    assert rows[1]["num_tokens"] == 0 and rows[1]["cpmi_sum"] == 0.0
    direct = scorer.score([docs[0], docs[2]], [hists[0], hists[2]], ["Built in 1889.", "Yes."])
    assert [rows[0]["cpmi_sum"], rows[2]["cpmi_sum"]] == pytest.approx([d["cpmi_sum"] for d in direct])
