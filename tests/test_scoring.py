"""score_records / `pmi-decode score` plumbing and the metric registry."""

import argparse
import json

import pytest
from tiny_models import DIALOGUES, tiny_model, tiny_tokenizer

from pmi_decode import scoring
from pmi_decode.metrics import PMIFaith
from pmi_decode.metrics.overlap import unigram_f1

RECORDS = [
    {"id": "a", "document": DIALOGUES[0][0], "history": DIALOGUES[0][1], "response": "It is in Paris.",
     "pmi_response": "The tower was built in 1889.", "plain_response": "I like cheese."},
    {"id": "b", "document": DIALOGUES[1][0], "history": DIALOGUES[1][1],
     "pmi_response": "Miles Davis, 1959.", "plain_response": "No idea."},
]


def test_every_response_field_is_scored_and_pmi_matches_the_scorer():
    model, tokenizer = tiny_model("gpt2"), tiny_tokenizer("gpt2")
    scored = scoring.score_records(RECORDS, ["pmi_faith", "unigram_f1"], scorer_model=(model, tokenizer))
    assert set(scored[0]["scores"]) == {"response", "pmi_response", "plain_response"}
    assert set(scored[1]["scores"]) == {"pmi_response", "plain_response"}
    direct = PMIFaith(model, tokenizer).score([r["document"] for r in RECORDS], [r["history"] for r in RECORDS],
                                              [r["pmi_response"] for r in RECORDS])
    for record, expected in zip(scored, direct):
        got = record["scores"]["pmi_response"]
        assert got["cpmi_sum"] == pytest.approx(expected["cpmi_sum"], abs=1e-9)
        assert got["upmi_mean"] == pytest.approx(expected["upmi_mean"], abs=1e-9)
        assert got["unigram_f1"] == pytest.approx(unigram_f1([record["pmi_response"]], [record["document"]])[0])
    assert "scores" not in RECORDS[0]  # inputs are not modified


def test_pmi_faith_metric_passes_the_history_window():
    model, tokenizer = tiny_model("gpt2"), tiny_tokenizer("gpt2")
    parser = argparse.ArgumentParser()
    scoring.add_score_arguments(parser)
    assert parser.parse_args(["--input", "x", "--max-history-turns", "1"]).max_history_turns == 1
    scored = scoring.score_records(RECORDS[:1], ["pmi_faith"], scorer_model=(model, tokenizer), max_history_turns=1)
    direct = PMIFaith(model, tokenizer).score([RECORDS[0]["document"]], [RECORDS[0]["history"][-1:]],
                                              [RECORDS[0]["pmi_response"]])[0]
    assert scored[0]["scores"]["pmi_response"]["cpmi_sum"] == pytest.approx(direct["cpmi_sum"], abs=1e-9)


def test_registered_metric_is_used_without_changing_the_logic():
    calls = []

    @scoring.register_metric("length_test")
    def length(documents, histories, responses, **options):
        calls.append(options.get("flavour"))
        return [{"length": len(r)} for r in responses]

    try:
        scored = scoring.score_records(RECORDS, ["length_test"], flavour="x")
        assert scored[1]["scores"]["plain_response"] == {"length": len("No idea.")}
        assert calls == ["x", "x", "x"]  # once per response field present
    finally:
        scoring.METRICS.pop("length_test")


def test_errors_name_the_problem():
    with pytest.raises(ValueError, match="unknown metric 'nope'"):
        scoring.score_records(RECORDS, ["nope"])
    with pytest.raises(ValueError, match="record 0 .*'history' must be a list"):
        scoring.score_records([{"id": 1, "document": "d", "history": "just a string", "response": "r"}], ["bleu"])
    scoring.register_metric("short_test", lambda d, h, r, **o: [])
    try:
        with pytest.raises(RuntimeError, match="returned 0 results for 1 responses"):
            scoring.score_records(RECORDS, ["short_test"])
    finally:
        scoring.METRICS.pop("short_test")


def test_run_score_cli_round_trip(tmp_path, capsys):
    source = tmp_path / "out.jsonl"
    source.write_text("\n".join(json.dumps(r) for r in RECORDS) + "\n")
    parser = argparse.ArgumentParser()
    scoring.add_score_arguments(parser)
    args = parser.parse_args(["--input", str(source), "--metrics", "unigram_f1,bleu,rouge_l"])
    output = scoring.run_score(args)
    assert output == tmp_path / "out.scored.jsonl"
    rows = [json.loads(line) for line in output.read_text().splitlines()]
    assert [r["id"] for r in rows] == ["a", "b"]
    assert set(rows[0]["scores"]["response"]) == {"unigram_f1", "bleu", "rouge_l"}
    assert "scored 2 records" in capsys.readouterr().out


def test_read_jsonl_reports_the_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(RECORDS[0]) + "\n{not json\n")
    with pytest.raises(ValueError, match="bad.jsonl, line 2: not valid JSON"):
        scoring.read_jsonl(bad)
    missing = tmp_path / "m.jsonl"
    missing.write_text(json.dumps({"id": 1, "history": ["h"], "response": "r"}) + "\n")
    with pytest.raises(ValueError, match="m.jsonl, line 1: field 'document'"):
        scoring.read_jsonl(missing)
