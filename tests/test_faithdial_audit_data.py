"""FaithDial data-audit reader on a fixture cut from the real files (typos and combined labels kept)."""

import os
from pathlib import Path

import pytest

from pmi_decode.data import load_dialogues
from pmi_decode.data.faithdial_audit import (
    AuditFormatError,
    is_faithful,
    normalise_labels,
    read_audit_file,
    read_faithdial_audit,
)
from pmi_decode.data.records import LoadReport

FIXTURES = Path(__file__).parent / "fixtures" / "faithdial_audit"
# The real files, where a checkout has them beside it (PMI_DECODE_DATA_AUDIT overrides).
REAL = next((p for p in (Path(os.environ.get("PMI_DECODE_DATA_AUDIT", "/nonexistent")),
                         Path(__file__).resolve().parents[1].parent / "shared" / "data" / "faithdial_data_audit",
                         Path(__file__).resolve().parents[1].parents[1] / "shared" / "data" / "faithdial_data_audit")
             if p.is_dir()), Path("/nonexistent"))


@pytest.mark.parametrize(
    "text, labels",
    [
        ("entailment", ("entailment",)),
        ("entailmentt,uncooperative", ("entailment", "uncooperative")),
        ("entailment. uncooperative", ("entailment", "uncooperative")),
        ("hallucinated", ("hallucination",)),
        ("Partial Hallucination", ("hallucination",)),
        ("entailment,hallucination", ("entailment", "hallucination")),
        ("Generic", ("generic",)),
    ],
)
def test_label_spellings_are_normalised(text, labels):
    assert normalise_labels(text) == (labels, [])


def test_unknown_label_pieces_are_returned_not_guessed():
    assert normalise_labels("entailment, banana") == (("entailment",), ["banana"])


def test_two_mappings():
    assert is_faithful(("entailment",), "strict") and is_faithful(("entailment",), "lenient")
    assert not is_faithful(("entailment", "uncooperative"), "strict")
    assert is_faithful(("entailment", "uncooperative"), "lenient")
    for labels in (("entailment", "hallucination"), ("generic",), ("uncooperative",), ("hallucination",)):
        assert not is_faithful(labels, "strict") and not is_faithful(labels, "lenient")
    with pytest.raises(ValueError, match="mapping"):
        is_faithful(("entailment",), "loose")


def test_reads_every_folder_of_the_fixture():
    report = LoadReport(dataset="faithdial_audit", split="all")
    examples = read_faithdial_audit(FIXTURES, report=report)
    assert len(examples) == 13  # 14 rows, one gold row has no label
    assert report.skipped == {"unlabelled": 1} and not report.unresolved
    assert {e.model_name for e in examples} == {"gpt2", "doha", "ctrl", "gold"}
    assert {e.data_source for e in examples} == {"wow", "cmu", "tc"}
    by_label = {(e.model_name, e.begin_label): e for e in examples}
    typo = by_label[("doha", "entailmentt,uncooperative")]
    assert typo.labels == ("entailment", "uncooperative") and not typo.faithful and typo.faithful_lenient
    assert typo.data_source == "wow" and typo.file.endswith("doha_processed_wow.csv")
    assert by_label[("gpt2", "hallucinated")].labels == ("hallucination",)
    assert by_label[("gold", "Partial Hallucination")].labels == ("hallucination",)
    assert by_label[("gold", "Entailment")].faithful
    assert sum(e.faithful for e in examples) == 3
    assert sum(e.faithful_lenient for e in examples) == 6
    for e in examples:
        assert e.response and e.knowledge
        assert e.history == ([e.message] if e.message else [])


def test_response_column_is_named_after_the_system():
    (first, *_) = read_audit_file(FIXTURES / "CTRL" / "ctrl_processed_topicalchat.csv", "ctrl", "tc")
    assert first.response.startswith(first.response.strip()) and first.model_name == "ctrl"
    assert "\n" not in first.begin_label


def test_load_dialogues_registration_and_mapping_option():
    records, report = load_dialogues("faithdial_audit", "all", FIXTURES, return_report=True)
    assert len(records) == 13 and report.records == 13 and report.skipped["unlabelled"] == 1
    lenient = load_dialogues("faithdial-audit", "doha", FIXTURES, mapping="lenient")
    assert len(lenient) == 3 and all(r.meta["system"] == "doha" for r in lenient)
    assert sum(r.meta["faithful"] for r in lenient) == 2
    assert records[0].id.count("/") == 2 and records[0].document


def test_unlabelled_and_unmapped_rows_are_counted(tmp_path):
    folder = tmp_path / "GPT2"
    folder.mkdir()
    (folder / "gpt2_processed_wow.csv").write_text(
        "knowledge,history,gpt2,begin_label,vrm_label\n"
        "k1,h1,r1,entailment,question\n"
        "k2,,r2,,question\n"
        "k3,h3,r3,maybe,question\n"
        'k4,h4,"r4, with comma","entailment,banana",ack.\n'
    )
    report = LoadReport(dataset="faithdial_audit", split="all")
    examples = read_faithdial_audit(tmp_path, report=report)
    assert [e.response for e in examples] == ["r1", "r4, with comma"]
    assert report.skipped == {"unlabelled": 1, "no_known_label": 1}
    assert report.unresolved == {"unmapped_label": 2}
    assert examples[1].line == 5 and examples[0].history == ["h1"]


def test_bad_input_gives_clear_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="data-audit folder not found"):
        read_faithdial_audit(tmp_path / "nope")
    with pytest.raises(FileNotFoundError, match="no data-audit CSV"):
        read_faithdial_audit(tmp_path)
    (tmp_path / "GPT2").mkdir()
    (tmp_path / "GPT2" / "gpt2_processed_wow.csv").write_text("knowledge,history,response,begin_label\nk,h,r,entailment\n")
    with pytest.raises(AuditFormatError, match="no gpt2 column"):
        read_faithdial_audit(tmp_path)
    with pytest.raises(ValueError, match="unknown systems"):
        read_faithdial_audit(FIXTURES, systems=["bart"])
    with pytest.raises(ValueError, match="unknown split"):
        load_dialogues("faithdial_audit", "test", FIXTURES)
    with pytest.raises(ValueError, match="pass data_dir"):
        load_dialogues("faithdial_audit", "all")


@pytest.mark.skipif(not REAL.is_dir(), reason="the real data-audit files are not on this machine")
def test_real_files_counts():
    report = LoadReport(dataset="faithdial_audit", split="all")
    examples = read_faithdial_audit(REAL, report=report)
    assert len({(e.model_name, e.data_source) for e in examples}) == 12
    assert not report.unresolved and report.skipped == {"unlabelled": 792, "empty_response": 1}
    assert len(examples) + sum(report.skipped.values()) == 200 * 9 - 2 + 201 + 997 + 200
    assert len(examples) == 2403
    assert sum(e.faithful for e in examples) == 335 and sum(e.faithful_lenient for e in examples) == 552
