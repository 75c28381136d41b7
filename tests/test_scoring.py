"""score_records / `pmi-decode score` plumbing and the metric registry."""

import argparse
import json

import pytest
from tiny_models import DIALOGUES, tiny_model, tiny_tokenizer

from pmi_decode.batch import scoring
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
    scored = scoring.score_records(RECORDS, ["pmi_faith", "knowledge_f1"], scorer_model=(model, tokenizer))
    assert set(scored[0]["scores"]) == {"response", "pmi_response", "plain_response"}
    assert set(scored[1]["scores"]) == {"pmi_response", "plain_response"}
    direct = PMIFaith(model, tokenizer).score([r["document"] for r in RECORDS], [r["history"] for r in RECORDS],
                                              [r["pmi_response"] for r in RECORDS])
    for record, expected in zip(scored, direct):
        got = record["scores"]["pmi_response"]
        assert got["cpmi_sum"] == pytest.approx(expected["cpmi_sum"], abs=1e-9)
        assert got["upmi_mean"] == pytest.approx(expected["upmi_mean"], abs=1e-9)
        assert got["knowledge_f1"] == pytest.approx(unigram_f1([record["pmi_response"]], [record["document"]])[0])
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


def test_two_metrics_that_write_one_column_must_agree():
    """Metrics may share a column (FaithScore writes PMI-Faith's); one that means something else
    there would overwrite the other's values without a word."""
    scoring.register_metric("length_a", lambda d, h, r, **o: [{"size": len(x)} for x in r])
    scoring.register_metric("length_b", lambda d, h, r, **o: [{"size": float(len(x))} for x in r])
    scoring.register_metric("words_b", lambda d, h, r, **o: [{"size": len(x.split())} for x in r])
    try:
        scoring.score_records(RECORDS, ["length_a", "length_b"])  # the same values: fine
        with pytest.raises(RuntimeError, match="'length_a' and 'words_b' both write the column 'size'"):
            scoring.score_records(RECORDS, ["length_a", "words_b"])
    finally:
        for name in ("length_a", "length_b", "words_b"):
            scoring.METRICS.pop(name)


def test_errors_name_the_problem():
    with pytest.raises(ValueError, match="unknown metric 'nope'"):
        scoring.score_records(RECORDS, ["nope"])
    with pytest.raises(ValueError, match="record 0 .*'history' must be a list"):
        scoring.score_records([{"id": 1, "document": "d", "history": "just a string", "response": "r"}], ["gold_bleu"])
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
    args = parser.parse_args(["--input", str(source), "--metrics", "gold_f1,knowledge_f1,gold_rouge_l,repetition"])
    output = scoring.run_score(args)
    assert output == tmp_path / "out.scored.jsonl"
    rows = [json.loads(line) for line in output.read_text().splitlines()]
    assert [r["id"] for r in rows] == ["a", "b"]
    # the gold itself gets no gold_* score; record b has no gold, so its systems get none either
    assert set(rows[0]["scores"]["response"]) == {"knowledge_f1", "distinct_2", "repeated_3gram_rate"}
    assert {"gold_f1", "gold_rouge_l", "knowledge_f1"} <= set(rows[0]["scores"]["pmi_response"])
    assert "gold_f1" not in rows[1]["scores"]["pmi_response"]
    out = capsys.readouterr().out
    assert "scored 2 records" in out
    # the table of means: one column per system, the gold labelled as such
    header = next(line for line in out.splitlines() if line.startswith("mean"))
    assert header.split()[1:] == ["gold", "(human)", "pmi_response", "plain_response"]
    pmi_f1 = [unigram_f1([r["pmi_response"]], [r["document"]])[0] for r in RECORDS]
    row = next(line for line in out.splitlines() if line.startswith("knowledge_f1"))
    assert float(row.split()[2]) == pytest.approx(sum(pmi_f1) / 2, rel=1e-3)
    summary = json.loads((tmp_path / "out.scored.summary.json").read_text())["means"]
    assert summary["pmi_response"]["knowledge_f1"] == pytest.approx(sum(pmi_f1) / 2)
    assert summary["pmi_response"]["gold_f1"] == pytest.approx(unigram_f1(["The tower was built in 1889."],
                                                                           ["It is in Paris."])[0])


def test_gold_metrics_compare_with_the_human_response_and_knowledge_metrics_with_the_document():
    records = [{"id": 1, "document": "alpha beta gamma", "history": ["q"], "response": "delta epsilon",
                "pmi_response": "alpha beta gamma", "plain_response": "delta epsilon"}]
    got = scoring.score_records(records, ["gold_f1", "knowledge_f1", "gold_rouge_l", "knowledge_rouge_l",
                                          "gold_bleu", "knowledge_bleu"])[0]["scores"]
    assert got["pmi_response"]["knowledge_f1"] == got["pmi_response"]["knowledge_rouge_l"] == 1.0
    assert got["pmi_response"]["gold_f1"] == got["pmi_response"]["gold_rouge_l"] == 0.0
    assert got["plain_response"]["gold_f1"] == got["plain_response"]["gold_rouge_l"] == 1.0
    assert got["plain_response"]["knowledge_f1"] == 0.0
    assert got["plain_response"]["gold_bleu"] > 50 > got["plain_response"]["knowledge_bleu"]


def test_the_command_line_refuses_the_ambiguous_names_and_lists_every_metric(tmp_path, capsys):
    source = tmp_path / "out.jsonl"
    source.write_text(json.dumps(RECORDS[0]) + "\n")
    parser = argparse.ArgumentParser()
    scoring.add_score_arguments(parser)
    with pytest.raises(ValueError, match="'rouge_l' is ambiguous: use gold_rouge_l .* or knowledge_rouge_l"):
        scoring.run_score(parser.parse_args(["--input", str(source), "--metrics", "rouge_l"]))
    assert not (tmp_path / "out.scored.jsonl").exists()
    help_text = parser.format_help()
    for name in scoring.available_metrics():
        assert f"  {name} " in help_text, name
    assert "against the human response" in help_text and "against the document" in help_text


def test_means_skip_undefined_values():
    records = [{"scores": {"pmi_response": {"distinct_2": 0.5, "truncated": True}}},
               {"scores": {"pmi_response": {"distinct_2": None}}},
               {"scores": {"pmi_response": {"distinct_2": 1.0}}}]
    summary = scoring.summarise_scores(records)
    assert summary == {"pmi_response": {"n": 3, "distinct_2": 0.75}}
    table = scoring.format_means_table(summary)
    assert "0.75" in table and "truncated" not in table


def test_read_jsonl_reports_the_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(RECORDS[0]) + "\n{not json\n")
    with pytest.raises(ValueError, match="bad.jsonl, line 2: not valid JSON"):
        scoring.read_jsonl(bad)
    missing = tmp_path / "m.jsonl"
    missing.write_text(json.dumps({"id": 1, "history": ["h"], "response": "r"}) + "\n")
    with pytest.raises(ValueError, match="m.jsonl, line 1: field 'document'"):
        scoring.read_jsonl(missing)


def test_scoring_with_the_generator_itself_says_so(tmp_path, capsys):
    model_dir = tmp_path / "tiny"
    from tiny_models import tiny_model as make, tiny_tokenizer as make_tok

    make("gpt2").save_pretrained(model_dir)
    make_tok("gpt2").save_pretrained(model_dir)
    source = tmp_path / "out.jsonl"
    source.write_text(json.dumps(dict(RECORDS[1], settings={"model": str(model_dir)})) + "\n")
    parser = argparse.ArgumentParser()
    scoring.add_score_arguments(parser)
    scoring.run_score(parser.parse_args(["--input", str(source), "--metrics", "pmi_faith",
                                         "--scorer-model", str(model_dir)]))
    assert "is the model that generated these responses" in capsys.readouterr().out


def test_score_reads_a_saved_dataset_as_it_reads_jsonl(tmp_path, capsys):
    datasets = pytest.importorskip("datasets")
    source = tmp_path / "out.jsonl"
    source.write_text("\n".join(json.dumps(r) for r in RECORDS) + "\n")
    datasets.Dataset.from_list(RECORDS).save_to_disk(tmp_path / "ds")
    parser = argparse.ArgumentParser()
    scoring.add_score_arguments(parser)
    metrics = ["--metrics", "gold_f1,knowledge_f1,repetition"]
    from_jsonl = scoring.run_score(parser.parse_args(["--input", str(source), *metrics]))
    from_disk = scoring.run_score(parser.parse_args(["--input", str(tmp_path / "ds"), *metrics]))
    assert from_disk == tmp_path / "ds.scored.jsonl"
    read = lambda path: [json.loads(line)["scores"] for line in path.read_text().splitlines()]  # noqa: E731
    assert read(from_disk) == read(from_jsonl)
    with pytest.raises(ValueError, match="is a hub data set: give --output"):
        scoring.run_score(parser.parse_args(["--input", "some-org/outputs", "--split", "test", *metrics]))
    with pytest.raises(ValueError, match="needs --split"):
        scoring.run_score(parser.parse_args(["--input", "some-org/outputs", "--output", str(tmp_path / "x.jsonl"),
                                             *metrics]))


def test_a_scorer_that_cannot_load_is_named_before_any_metric_runs(tmp_path, monkeypatch):
    from pmi_decode.models import ModelNotAvailableError

    source = tmp_path / "out.jsonl"
    source.write_text("\n".join(json.dumps(r) for r in RECORDS) + "\n")
    ran = []
    monkeypatch.setitem(scoring.METRICS, "knowledge_f1", lambda *a, **k: ran.append(1) or [{}] * len(a[0]))
    parser = argparse.ArgumentParser()
    scoring.add_score_arguments(parser)
    args = parser.parse_args(["--input", str(source), "--metrics", "knowledge_f1,pmi_faith",
                              "--scorer-model", str(tmp_path / "no-such-model")])
    with pytest.raises(ModelNotAvailableError, match=r"nothing was scored:\n  - --scorer-model .*no-such-model"):
        scoring.run_score(args)
    assert ran == [] and not (tmp_path / "out.scored.jsonl").exists()


def test_each_metric_names_the_options_it_reads_and_begin_refuses_a_misspelt_one():
    import importlib.util
    from pathlib import Path

    import yaml

    from pmi_decode.metrics.registry import metric_options

    assert {"include_eos", "compute", "scorer_model", "batch_size"} <= metric_options("pmi_faith")
    assert {"faithcritic_model", "batch_size"} <= metric_options("faithcritic") and "q2_qa" in metric_options("q2")
    assert metric_options("bleu") == frozenset()
    root = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location("begin_script", root / "eval" / "begin.py")
    begin = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(begin)
    for config in sorted((root / "configs").glob("begin*.yaml")):  # the shipped configs pass
        begin.check_metric_options(yaml.safe_load(config.read_text())["metrics"])
    with pytest.raises(ValueError, match="metric 'pmi_faith': unknown option 'include_eoss' .*'include_eos'"):
        begin.check_metric_options([{"name": "pmi_faith", "options": {"include_eoss": True}}])
    with pytest.raises(ValueError, match="unknown metric"):
        begin.check_metric_options([{"name": "pmi_fiath"}])


def test_the_docs_name_the_default_metrics():
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "metrics.md").read_text(encoding="utf-8")
    listed = re.search(r"Default metrics: `([^`]+)`", text).group(1)
    assert [m.strip() for m in listed.split(",")] == list(scoring.DEFAULT_METRICS)


def test_an_empty_response_gets_no_pmi_faith_and_errors_name_the_record(monkeypatch):
    """One empty response no longer stops the whole file; an error a scorer raises for its n-th
    response names the record it came from."""
    model, tokenizer = tiny_model("llama"), tiny_tokenizer("llama")
    records = [dict(RECORDS[0], id="a"), dict(RECORDS[1], id="b", pmi_response="  ")]
    scored = scoring.score_records(records, ["pmi_faith"], scorer_model=(model, tokenizer))
    assert "cpmi_mean" in scored[0]["scores"]["pmi_response"] and scored[1]["scores"]["pmi_response"] == {}

    def fails_on_the_second(documents, histories, responses, **options):
        if len(responses) > 1:
            raise ValueError("item 1: the last history turn does not fit")
        return [{"x": 1.0}]

    scoring.register_metric("fails_test", fails_on_the_second)
    try:
        with pytest.raises(ValueError, match="fails_test on record 'b', pmi_response: the last history turn"):
            scoring.score_records(records, ["fails_test"])
    finally:
        scoring.METRICS.pop("fails_test")


def test_q2_models_can_be_given_on_the_command_line():
    """Offline, Q² runs only on local models: the score command takes them as flags."""
    from pmi_decode.metrics.q2 import config_from_scoring_options

    parser = argparse.ArgumentParser()
    scoring.add_score_arguments(parser)
    args = parser.parse_args(["--input", "x.jsonl", "--q2-qg", "/models/qg", "--q2-qa", "/models/qa",
                              "--q2-nli", "/models/nli"])
    config = config_from_scoring_options(scoring._score_options(args, None))
    assert (config.qg, config.qa, config.nli) == ("/models/qg", "/models/qa", "/models/nli")
