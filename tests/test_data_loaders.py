"""Loaders on small fixtures cut from the official files (and hand-made post-build / FaithDial ones)."""

import json
import shutil
from pathlib import Path

import pytest

from pmi_decode.data import DialogueRecord, load_dialogues

FIX = Path(__file__).parent / "fixtures"
MD2D = FIX / "multidoc2dial"
TC = FIX / "topicalchat"
TC_POST = FIX / "topicalchat_postbuild"
SURVIVORS = "Benefits Planner: Survivors | Planning For Your Survivors | Social Security Administration#1_0"
CONV_B = "t_41792ad7-9b92-476b-bf95-18a370bcd966"
CONV_A = "t_25bee471-c901-4903-ab98-cd2b037ca397"


def _spans():
    docs = json.loads((MD2D / "multidoc2dial_doc.json").read_text())["doc_data"]["ssa"]
    return docs[SURVIVORS]["spans"]


def test_record_reads_as_attributes_and_keys():
    rec = DialogueRecord(id="a", document="d", history=["h"], response="r")
    assert rec["document"] == rec.document == "d"
    assert rec.get("meta") == {} and rec.get("nope", 3) == 3
    with pytest.raises(KeyError):
        rec["nope"]


def test_multidoc2dial_counts_and_missing_documents():
    records, report = load_dialogues("multidoc2dial", "train", MD2D, return_report=True)
    # ssa dialogue: agent turns 2 and 4 reference the one document in the file; 6, 8, 10 do not.
    # dmv dialogue: 7 agent turns, two of them consecutive (merged), all missing their document.
    assert [r.id for r in records] == ["c4db6e2b814346c0efa90eba0e604657_2", "c4db6e2b814346c0efa90eba0e604657_4"]
    assert report.records == 2
    assert report.skipped == {"missing_document": 3 + 6}
    # one count per agent-turn reference to a missing document: 3 (ssa) + 15 (dmv)
    assert report.unresolved["doc_id"] == 3 + 15
    assert report.merged_turns == 1
    assert "Survivors | How You Apply" in " ".join(report.examples["doc_id"])


def test_multidoc2dial_document_is_referenced_spans_in_span_order(tmp_path):
    spans = _spans()
    records = load_dialogues("multidoc2dial", "train", MD2D)
    rec = records[1]
    expected = " ".join(" ".join(spans[s]["text_sp"].split()) for s in ("3", "4"))
    assert rec.document == expected
    assert rec.meta["speakers"] == ["user", "agent", "user"]
    assert len(rec.history) == 3
    # the same references listed out of order still give the spans in document order
    data = json.loads((MD2D / "multidoc2dial_dial_train.json").read_text())
    turn = data["dial_data"]["ssa"][0]["turns"][3]
    turn["references"].reverse()
    assert [r["id_sp"] for r in turn["references"]] == ["4", "3"]
    (tmp_path / "multidoc2dial_dial_train.json").write_text(json.dumps(data))
    shutil.copy(MD2D / "multidoc2dial_doc.json", tmp_path)
    assert load_dialogues("multidoc2dial", "train", tmp_path)[1].document == expected


def test_multidoc2dial_merges_consecutive_agent_turns():
    data = json.loads((MD2D / "multidoc2dial_dial_train.json").read_text())
    roles = [t["role"] for t in data["dial_data"]["dmv"][0]["turns"]]
    assert "agent agent" in " ".join(roles)  # the fixture holds the case
    _, report = load_dialogues("multidoc2dial", "train", MD2D, return_report=True)
    assert any("c50af25c" in note for note in report.notes)


def test_multidoc2dial_malformed_file_names_file_and_line(tmp_path):
    shutil.copy(MD2D / "multidoc2dial_doc.json", tmp_path)
    (tmp_path / "multidoc2dial_dial_test.json").write_text('{"dial_data": {\n "x": [1,]\n}}')
    with pytest.raises(ValueError, match=r"multidoc2dial_dial_test.json: line 2"):
        load_dialogues("multidoc2dial", "test", tmp_path)
    (tmp_path / "multidoc2dial_dial_test.json").write_text('{"dialogues": []}')
    with pytest.raises(ValueError, match="dial_data"):
        load_dialogues("multidoc2dial", "test", tmp_path)
    with pytest.raises(FileNotFoundError, match="multidoc2dial_dial_validation.json"):
        load_dialogues("multidoc2dial", "validation", tmp_path)


def test_topicalchat_prebuild_counts_personal_knowledge_and_unresolved():
    records, report = load_dialogues("topicalchat", "validation", TC, return_report=True)
    # per conversation: turn 0 has no history; PK-tagged turns 16, 18, 19, 20 (B) and 16, 18 (A);
    # article-only turns 3, 4 (B) and 5, 7 (A) have nothing resolvable offline.
    assert report.skipped == {"no_history": 2, "personal_knowledge": 6, "no_resolved_knowledge": 4}
    assert len(records) == 42 - 12 == 30
    assert report.unresolved["article_section"] == 5
    assert report.unresolved["fun_fact"] > 0
    assert not any("Personal Knowledge" in r.meta["knowledge_source"] for r in records)
    assert {r.id for r in records}.isdisjoint({f"{CONV_B}_16", f"{CONV_B}_18", f"{CONV_A}_16"})


def test_topicalchat_prebuild_document_is_the_agents_wiki_section():
    wiki = json.loads((TC / "wiki.json").read_text())
    by_id = {kind: {i: t for t, i in v.items()} for kind, v in wiki.items()}
    records = {r.id: r for r in load_dialogues("topicalchat", "validation", TC)}
    # turn 1 of conversation B: agent_2 names FS2, whose lead section is a *summarized* one (10420)
    rec = records[f"{CONV_B}_1"]
    assert rec.document == " ".join(by_id["summarized_wiki_lead_section"][10420].split())
    # turn 2: agent_1 names FS3 -> shortened section 81262
    assert records[f"{CONV_B}_2"].document == " ".join(by_id["shortened_wiki_lead_section"][81262].split())
    assert rec.history == ["Hello, do you like superhero movies?"]
    assert rec.meta["speakers"] == ["agent_1"] and rec.meta["agent"] == "agent_2"


def test_topicalchat_wiki_under_src(tmp_path):
    shutil.copytree(TC / "conversations", tmp_path / "conversations")
    shutil.copytree(TC / "reading_sets", tmp_path / "reading_sets")
    (tmp_path / "src" / "wiki").mkdir(parents=True)
    shutil.copy(TC / "wiki.json", tmp_path / "src" / "wiki" / "wiki.json")
    assert len(load_dialogues("topicalchat", "validation", tmp_path)) == 30
    shutil.rmtree(tmp_path / "src")
    records, report = load_dialogues("topicalchat", "validation", tmp_path, return_report=True)
    assert records == [] and report.unresolved["wiki_lead_section"] > 0


def test_topicalchat_postbuild_documents():
    post = json.loads((TC_POST / "reading_sets" / "post-build" / "valid_rare.json").read_text())[CONV_A]
    records, report = load_dialogues("topicalchat", "validation", TC_POST, return_report=True)
    by_id = {r.id: r for r in records}
    assert not report.unresolved
    assert report.skipped == {"no_history": 1, "personal_knowledge": 2}
    # agent_2's own FS1: lead section then its own fun facts (not agent_1's)
    fs1 = post["agent_2"]["FS1"]
    expected = " ".join(" ".join(t.split()) for t in [fs1["shortened_wiki_lead_section"]] + fs1["fun_facts"])
    assert by_id[f"{CONV_A}_1"].document == expected
    assert "agent_1 FS1" not in by_id[f"{CONV_A}_1"].document
    assert by_id[f"{CONV_A}_5"].document == post["article"]["AS1"]
    # two sources: FS2 then FS3 of agent_1, in the order the turn names them
    doc = by_id[f"{CONV_A}_20"].document
    assert doc.index("agent_1 FS2 fun fact") < doc.index("agent_1 FS3 fun fact")


def test_topicalchat_personal_knowledge_kept_when_asked():
    records = load_dialogues("topicalchat", "validation", TC_POST, skip_personal_knowledge=False)
    assert f"{CONV_A}_16" in {r.id for r in records}


def test_topicalchat_split_names():
    with pytest.raises(FileNotFoundError, match="valid_freq.json"):
        load_dialogues("topicalchat", "validation", TC, rare=False)
    with pytest.raises(ValueError, match="topicalchat split"):
        load_dialogues("topicalchat", "bogus", TC)
    with pytest.raises(ValueError, match="unknown data set"):
        load_dialogues("wow", "train", TC)


@pytest.mark.parametrize("path,split", [("rows", "test"), ("nested", "test"), ("rows", "validation")])
def test_faithdial_local_formats(path, split):
    records, report = load_dialogues("faithdial", split, FIX / "faithdial" / path, return_report=True)
    assert [r.id for r in records] == ["0_0", "0_1", "1_0"]
    assert report.skipped == {"no_history": 1}
    rec = records[1]
    assert rec.response == "It was designed by the company of Gustave Eiffel."
    assert rec.document.startswith("It is named after the engineer Gustave Eiffel")
    assert rec.history[-1] == "Who designed it?"
    assert rec.meta["speakers"] == ["seeker", "wizard", "seeker"]
    assert rec.meta["original_response"].startswith("Gustave Eiffel designed it")


def test_faithdial_malformed_rows(tmp_path):
    (tmp_path / "test.json").write_text(json.dumps([{"history": ["hi"], "response": "x"}]))
    with pytest.raises(ValueError, match=r'test.json: row 0 .*"knowledge"'):
        load_dialogues("faithdial", "test", tmp_path)
    (tmp_path / "train.jsonl").write_text('{"history": []}\n{oops\n')
    with pytest.raises(ValueError, match="train.jsonl: line 2"):
        load_dialogues("faithdial", "train", tmp_path)
    row = {"history": ["Hi, who built it?"], "knowledge": "Eiffel built it.", "response": "Eiffel did."}
    (tmp_path / "valid.json").write_text(json.dumps([dict(row, knowledge=["a", "b"])]))
    with pytest.raises(ValueError, match=r'row 0 .*"knowledge" must be a string, got list'):
        load_dialogues("faithdial", "valid", tmp_path)
    # no knowledge or no response: left out and counted, not trained on as "None" or ""
    (tmp_path / "valid.json").write_text(json.dumps([row, dict(row, knowledge=None), dict(row, response="  ")]))
    records, report = load_dialogues("faithdial", "valid", tmp_path, return_report=True)
    assert [r.response for r in records] == ["Eiffel did."]
    assert report.skipped == {"no_knowledge": 1, "no_response": 1}


def test_faithdial_hub_rows(monkeypatch):
    """The hub path reads rows as ``datasets`` yields them (the hub itself is not reachable in tests)."""
    import datasets

    rows = json.loads((FIX / "faithdial" / "rows" / "test.json").read_text())
    asked = {}

    def fake_load_dataset(name, split):
        asked.update(name=name, split=split)
        return datasets.Dataset.from_list(rows)

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    records = load_dialogues("faithdial", "valid")
    assert asked == {"name": "McGill-NLP/FaithDial", "split": "validation"}
    assert [r.id for r in records] == ["0_0", "0_1", "1_0"]


def _hub_stand_in(tmp_path, monkeypatch):
    """The hub repository as datasets sees it, on disk: at its main revision a folder holding the
    loading script (which datasets itself refuses), at refs/convert/parquet the parquet conversion
    of the fixture rows. Only the revision lookup is simulated; the refusal is datasets' own."""
    import datasets

    from pmi_decode.data import faithdial

    script_repo = tmp_path / "FaithDial"
    script_repo.mkdir()
    (script_repo / "FaithDial.py").write_text("# a loading script, as the hub repository still holds\n")
    rows = json.loads((FIX / "faithdial" / "rows" / "test.json").read_text())
    (tmp_path / "parquet" / "default" / "test").mkdir(parents=True)
    datasets.Dataset.from_list(rows).to_parquet(str(tmp_path / "parquet" / "default" / "test" / "0000.parquet"))
    real, asked = datasets.load_dataset, []

    def hub(name, split, revision=None):
        asked.append((name, split, revision))
        if revision == faithdial.PARQUET_REVISION:
            return real(str(tmp_path / "parquet"), split=split)
        return real(str(script_repo), split=split)

    monkeypatch.setattr(datasets, "load_dataset", hub)
    return asked, real, script_repo


def test_faithdial_hub_falls_back_to_the_parquet_conversion(tmp_path, monkeypatch, caplog):
    asked, real, script_repo = _hub_stand_in(tmp_path, monkeypatch)
    with pytest.raises(RuntimeError, match="scripts are no longer supported"):
        real(str(script_repo), split="test")  # what datasets does with the repository as it is
    with caplog.at_level("WARNING"):
        records = load_dialogues("faithdial", "test")
    assert asked == [("McGill-NLP/FaithDial", "test", None), ("McGill-NLP/FaithDial", "test", "refs/convert/parquet")]
    assert [r.id for r in records] == ["0_0", "0_1", "1_0"]
    assert records == load_dialogues("faithdial", "test", FIX / "faithdial" / "rows")
    assert "refs/convert/parquet" in caplog.text


def test_faithdial_hub_fallback_failure_says_both(tmp_path, monkeypatch):
    asked, _, _ = _hub_stand_in(tmp_path, monkeypatch)
    with pytest.raises(RuntimeError, match=r"loading script.*parquet conversion.*could not be read.*data_dir"):
        load_dialogues("faithdial", "train")  # the conversion has no train split
    assert len(asked) == 2


@pytest.mark.parametrize("name,split,data_dir", [("faithdial", "test", FIX / "faithdial" / "rows"),
                                                 ("multidoc2dial", "train", MD2D),
                                                 ("topicalchat", "validation", TC),
                                                 ("consistest", "valid", FIX / "consistest"),
                                                 ("faithdial_audit", "all", FIX / "faithdial_audit")])
def test_loaders_return_a_dataset_with_declared_features(name, split, data_dir):
    datasets = pytest.importorskip("datasets")
    from pmi_decode.data.hf_datasets import dialogue_features, rows_of

    records = load_dialogues(name, split, data_dir)
    dataset = load_dialogues(name, split, data_dir, as_dataset=True)
    assert isinstance(dataset, datasets.Dataset) and dataset.features == dialogue_features()
    assert dataset.features["history"].feature.dtype == "string" and dataset.features["meta"].dtype == "string"
    assert len(dataset) == len(records)
    back = rows_of(dataset)
    assert [DialogueRecord(**row) for row in back] == records  # meta read back from its JSON string


def test_malformed_reading_sets_and_spans_name_the_entry(tmp_path):
    """A reading set that is not an object, a span without text, references that are not objects:
    a ValueError naming the file and the entry, not an AttributeError or KeyError from inside."""
    import shutil

    tc = tmp_path / "tc"
    shutil.copytree(FIX / "topicalchat", tc)
    sets_file = next((tc / "reading_sets").rglob("valid_rare.json"))
    sets = json.loads(sets_file.read_text())
    first = next(iter(sets))
    sets[first] = ["not", "an", "object"]
    sets_file.write_text(json.dumps(sets))
    with pytest.raises(ValueError, match=f'reading set "{first}": expected an object'):
        load_dialogues("topicalchat", "validation", tc)
    md = tmp_path / "md"
    shutil.copytree(FIX / "multidoc2dial", md)
    doc_file = md / "multidoc2dial_doc.json"
    docs = json.loads(doc_file.read_text())
    domain = next(iter(docs["doc_data"]))
    doc_id = next(iter(docs["doc_data"][domain]))
    span = next(iter(docs["doc_data"][domain][doc_id]["spans"]))
    del docs["doc_data"][domain][doc_id]["spans"][span]["text_sp"]
    doc_file.write_text(json.dumps(docs))
    with pytest.raises(ValueError, match=f'document "{doc_id}": span .* has no "text_sp" text'):
        load_dialogues("multidoc2dial", "train", md)
