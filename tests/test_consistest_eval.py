"""eval/consistest.py end to end on the hand-made fixtures with a tiny random model."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tiny_models import tiny_model, tiny_tokenizer

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "eval"))
import consistest as consistest_eval  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures" / "consistest"


def config(tmp_path, **extra):
    return consistest_eval.load_config(None, [f"data_dir={FIXTURES}", f"output_dir={tmp_path / 'out'}",
                                              "max_new_tokens=4", "num_beams=2", "batch_size=4"]
                                       + [f"{k}={v}" for k, v in extra.items()])


def test_decode_and_score_with_a_callable_nli(tmp_path):
    calls = []

    def nli(premises, hypotheses):
        calls.append(len(premises))
        return ["entailment"] * len(premises)

    model, tok = tiny_model("llama", dtype=__import__("torch").float32), tiny_tokenizer("llama")
    report = consistest_eval.run(config(tmp_path), model=model, tokenizer=tok, nli=nli)
    out = tmp_path / "out"
    assert set(report["systems"]) == {"PMI-Decode", "plain"} and report["num_samples"] == 18
    summary = report["systems"]["PMI-Decode"]["summary"]
    assert summary["all"]["n"] == 18 and summary["source=persona"]["n"] == 12 and summary["source=history"]["n"] == 6
    assert summary["all"]["decided"] == 18           # with NLI every item is decided
    rows = [json.loads(line) for line in (out / "scores.jsonl").read_text().splitlines()]
    assert len(rows) == 18 and calls
    generations = {g["id"]: g for g in map(json.loads, (out / "generations.jsonl").read_text().splitlines())}
    for row in rows:
        item = row["systems"]["PMI-Decode"]
        assert item["response"] == generations[row["id"]]["pmi_response"] and item["decision"]
        assert generations[row["id"]]["history"][-1] == row["question"]
    scores = [r["systems"]["plain"]["score"] for r in rows]
    assert report["systems"]["plain"]["summary"]["all"]["score"] == pytest.approx(sum(scores) / len(scores))
    assert "| PMI-Decode |" in (out / "consistest_results.md").read_text()
    # a rerun resumes: nothing is decoded again (no model given, so decoding would fail)
    again = consistest_eval.run(config(tmp_path, nli="none"))
    assert again["nli"] == "none (rules only, by request)"
    assert again["systems"]["plain"]["summary"]["all"]["n"] == 18
    # another prompt layout is no resume: the stored records hold the old layout's prompts
    with pytest.raises(ValueError, match="document_mode"):
        consistest_eval.run(config(tmp_path, nli="none", document_mode="persona"))


def test_unloadable_nli_falls_back_to_rules_and_says_why(tmp_path):
    model, tok = tiny_model("gpt2", dtype=__import__("torch").float32), tiny_tokenizer("gpt2")
    report = consistest_eval.run(config(tmp_path, nli=str(tmp_path / "missing-nli"), max_samples=6, compare="false"),
                                 model=model, tokenizer=tok)
    assert report["nli"].startswith("unavailable, rules only") and "missing-nli" in report["nli"]
    assert set(report["systems"]) == {"PMI-Decode"} and report["num_samples"] == 6


def test_config_errors_are_clear(tmp_path):
    with pytest.raises(ValueError, match="unknown config key 'nonsense'"):
        consistest_eval.load_config(None, ["nonsense=1"])
    # every decoding option may be set, as in the other decoding scripts
    assert consistest_eval.load_config(None, ["pmi_cap=1", "plausibility=0.2"])["pmi_cap"] == 1.0
    with pytest.raises(ValueError, match="distances"):
        consistest_eval.run(config(tmp_path, distances="[0, 5]"))


def test_command_line_with_a_model_folder(tmp_path):
    import torch

    model, tok = tiny_model("gpt2", dtype=torch.float32), tiny_tokenizer("gpt2")
    model.save_pretrained(tmp_path / "gen")
    tok.save_pretrained(tmp_path / "gen")
    report = consistest_eval.main(["--data-dir", str(FIXTURES), "--model", str(tmp_path / "gen"), "--nli", "none",
                                   "--output-dir", str(tmp_path / "cli"), "--max-samples", "4",
                                   "--set", "max_new_tokens=3", "--set", "num_beams=1", "--set", "threads=1"])
    assert report["num_samples"] == 4 and report["model"] == str(tmp_path / "gen")
    assert (tmp_path / "cli" / "consistest_results.json").is_file()
