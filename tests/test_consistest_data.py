"""The ConsisTest loader on hand-made files in the benchmark's formats."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pmi_decode.data import load_dialogues
from pmi_decode.data.consistest import build_samples, load_samples, read_dialogues, read_history_qas, read_persona_qas, to_record
from pmi_decode.data.records import LoadReport

FIXTURES = Path(__file__).parent / "fixtures" / "consistest"


def test_samples_from_the_three_files():
    report = LoadReport("consistest", "valid")
    samples = load_samples(FIXTURES, report=report)
    by_id = {s.id: s for s in samples}
    # dialog 0: 3 persona facts with 4 questions in all (the night-nurse fact has none), each at start and end
    persona0 = [s for s in samples if s.dialog_id == "0" and s.source == "persona"]
    assert len(persona0) == 8 and {s.position for s in persona0} == {"start", "end"}
    start, end = by_id["0-p0.0-start"], by_id["0-p0.0-end"]
    assert start.history == () and len(end.history) == 4                         # 2 * (num_history - 1)
    assert end.history[-1] == "green , like the grass on my farm ."               # ends on the persona speaker
    # history question asked right after the fact (turn 1 -> utterance 3) and two exchanges later
    d0, d2 = by_id["0-h0-d0"], by_id["0-h0-d2"]
    assert d0.history[-1] == "yes , i live on a small farm outside of denver ." and len(d0.history) == 4
    assert len(d2.history) == 6 and d2.history[1] == "yes , i live on a small farm outside of denver ."
    assert d0.fact == "i live on a small farm outside of denver ."                 # no alt_c: c is the premise
    assert by_id["0-h1-d0"].fact == "i don't drink coffee"                         # alt_c is the premise
    assert by_id["0-h1-d0"].fact_sentence.startswith("no , i never touch it")
    assert by_id["0-h1-d0"].raw_source == "hist_ext" and by_id["0-h1-d0"].source == "history"
    assert by_id["0-h1-d0"].answer == "no" and by_id["0-h1-d0"].type == "yn"
    # a distance that runs past the dialogue's end makes no sample, and is counted
    assert "0-h1-d2" not in by_id and report.skipped["distance_beyond_dialog"] == 4
    assert report.unresolved["persona_fact_without_questions"] == 2              # dialog 1's sisters and age
    assert len(samples) == report.records == 18


def test_records_for_decoding():
    sample = {s.id: s for s in load_samples(FIXTURES)}["1-h1-d0"]
    record = to_record(sample)
    assert record.history == ["How old are you?"] and record.response == "25"
    assert record.document.startswith("Your persona: i have two sisters .")
    assert record.document.rstrip().endswith("You: i'm 25 , and you ?")
    assert "Them: i am an only child . how old are you ?" in record.document
    assert record.meta["fact"] == "i am 25 years old" and record.meta["source"] == "history"
    kept = to_record(sample, document_mode="persona")
    assert "Conversation" not in kept.document and kept.history == [*sample.history, "How old are you?"]
    with pytest.raises(ValueError, match="document_mode"):
        to_record(sample, document_mode="all")


def test_registered_loader():
    records = load_dialogues("consistest", "valid", FIXTURES)
    assert len(records) == 18 and records[0].id == "0-p0.0-start"
    with pytest.raises(ValueError, match="single split"):
        load_dialogues("consistest", "train", FIXTURES)


def test_options_and_their_checks():
    dialogues = read_dialogues(FIXTURES / "valid.json")
    persona, history = read_persona_qas(FIXTURES / "persona_qas.json"), read_history_qas(FIXTURES / "history_qas.json")
    only_d0 = build_samples(dialogues, persona, history, distances=(0,), persona_positions=("start",))
    assert all(s.distance == 0 for s in only_d0) and all(s.position in ("start", "") for s in only_d0)
    assert len(only_d0) == 6 + 5   # 6 persona questions asked once, 5 history questions at distance 0
    with pytest.raises(ValueError, match=r"distances must be integers in \[0, num_history - 1\]"):
        build_samples(dialogues, persona, history, num_history=2, distances=(0, 2))
    with pytest.raises(ValueError, match="persona_positions"):
        build_samples(dialogues, persona, history, persona_positions=("middle",))


@pytest.mark.parametrize("name,content,message", [
    ("persona_qas.json", {"fact .": [{"q": "do you ?", "a": "yes", "type": "maybe"}]}, "type must be 'yn' or 'wh'"),
    ("persona_qas.json", {"fact .": [{"q": "do you ?", "type": "yn"}]}, "missing field"),
    ("history_qas.json", {"0": [{"c": "x", "q": "y?", "a": "z", "type": "wh", "turn": -1}]}, "non-negative integer"),
    ("history_qas.json", {"0": [{"c": "x", "q": "y?", "a": "z", "type": "wh", "turn": 0, "source": "pers"}]},
     "source must be one of"),
    ("valid.json", {"0": {"persona": ["a"]}}, "expected {'persona'"),
])
def test_malformed_files_name_the_problem(tmp_path, name, content, message):
    path = tmp_path / name
    path.write_text(json.dumps(content))
    reader = {"persona_qas.json": read_persona_qas, "history_qas.json": read_history_qas, "valid.json": read_dialogues}
    with pytest.raises(ValueError, match=message) as err:
        reader[name](path)
    assert name in str(err.value)


def test_original_personachat_layout(tmp_path):
    original = {"train": [], "valid": [{
        "personality": ["i have two sisters ."],
        "utterances": [
            {"history": ["hi !"], "candidates": ["bye", "hello , i have two sisters ."]},
            {"history": ["hi !", "hello , i have two sisters .", "nice ! do you have pets ?"],
             "candidates": ["x", "no pets , sorry ."]},
        ]}]}
    path = tmp_path / "personachat_self_original.json"
    path.write_text(json.dumps(original))
    dialogues = read_dialogues(path)
    assert dialogues == {"0": {"persona": ["i have two sisters ."], "utterances": [
        "hi !", "hello , i have two sisters .", "nice ! do you have pets ?", "no pets , sorry ."]}}
