"""The pmi-decode command line on tiny random models saved to a folder, as a user would pass them."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from tiny_models import DIALOGUES, tiny_model, tiny_tokenizer

from pmi_decode import defaults
from pmi_decode.cli import main
from pmi_decode.batch.decode import DialogueFileError, read_dialogues_jsonl, read_done_ids
from pmi_decode.demo import demo_dialogues_path, run_demo
from pmi_decode.models import load_model_and_tokenizer


def _save(tmp_path, kind, *, chat=False):
    folder = tmp_path / f"tiny-{kind}{'-chat' if chat else ''}"
    tiny_model(kind, dtype=torch.float32).save_pretrained(folder)
    tiny_tokenizer(kind, chat=chat).save_pretrained(folder)
    return str(folder)


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory):
    return _save(tmp_path_factory.mktemp("models"), "llama")


def _records(n=4):
    out = []
    for i in range(n):
        doc, hist = DIALOGUES[i % len(DIALOGUES)]
        rec = {"id": f"d{i}", "document": doc, "history": hist[: 1 + i % len(hist)]}
        if i % 2 == 0:
            rec["response"] = "gold answer"
        out.append(rec)
    return out


def _write_input(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return str(path)


def _read(path):
    return [json.loads(line) for line in open(path) if line.strip()]


def _gen(model, inp, out, *extra):
    return main(["generate", "--model", model, "--input", inp, "--output", out, "--max-new-tokens", "6",
                 "--quiet", *extra])


def test_generate_writes_one_complete_record_per_dialogue(tmp_path, llama_dir):
    records = _records(5)
    inp = _write_input(tmp_path / "in.jsonl", records)
    out = tmp_path / "sub" / "out.jsonl"
    assert _gen(llama_dir, inp, str(out), "--num-beams", "2", "--batch-size", "2", "--compare") == 0
    got = {r["id"]: r for r in _read(out)}
    assert sorted(got) == [r["id"] for r in records]
    for rec in records:
        row = got[rec["id"]]
        for key in ("document", "history"):
            assert row[key] == rec[key]
        assert row.get("response") == rec.get("response")
        assert isinstance(row["pmi_response"], str) and isinstance(row["plain_response"], str)
        assert row["settings"] == {"model": llama_dir, "alpha": defaults.ALPHA, "p": 0.9, "num_beams": 2,
                                   "do_sample": False,
                                   "max_new_tokens": 6, "seed": 0, "compare": True, "batch_size": 2,
                                   "max_input_length": None, "max_history_turns": None, "chat_template": None,
                                   "block_layout_markers": "markers+line_start+control_tokens", "response_no_repeat_ngram_size": "3+numbers_exempt",
                                   "conditional_end": True, "block_immediate_repeats": True, "capitalize_sentences": True,
                                   "keep_copied_numbers": True, "end_at_line_break": "auto", "dtype": None}


def test_without_compare_there_is_no_plain_response(tmp_path, llama_dir):
    inp = _write_input(tmp_path / "in.jsonl", _records(2))
    out = str(tmp_path / "out.jsonl")
    assert _gen(llama_dir, inp, out, "--num-beams", "1") == 0
    assert all("plain_response" not in r and r["pmi_response"] is not None for r in _read(out))


def test_alpha_zero_p_one_equals_plain_decoding(tmp_path, llama_dir):
    inp = _write_input(tmp_path / "in.jsonl", _records(3))
    out = str(tmp_path / "out.jsonl")
    assert _gen(llama_dir, inp, out, "--alpha", "0", "--p", "1", "--num-beams", "3", "--compare") == 0
    rows = _read(out)
    assert all(r["pmi_response"] == r["plain_response"] for r in rows)


def test_pmi_changes_the_text_against_plain_decoding(tmp_path, llama_dir):
    # alpha = 1 with the full vocabulary is pure PMI: on a random model it picks other tokens.
    inp = _write_input(tmp_path / "in.jsonl", _records(3))
    out = str(tmp_path / "out.jsonl")
    assert _gen(llama_dir, inp, out, "--alpha", "1", "--p", "1", "--num-beams", "1", "--compare") == 0
    assert any(r["pmi_response"] != r["plain_response"] for r in _read(out))


def test_resume_skips_done_ids_and_drops_a_half_written_line(tmp_path, llama_dir):
    records = _records(4)
    inp = _write_input(tmp_path / "in.jsonl", records)
    full = str(tmp_path / "full.jsonl")
    assert _gen(llama_dir, inp, full, "--batch-size", "1", "--num-beams", "1") == 0
    reference = {r["id"]: r for r in _read(full)}

    partial = tmp_path / "partial.jsonl"
    lines = open(full).read().splitlines(keepends=True)
    partial.write_text(lines[0] + lines[1] + lines[2][: len(lines[2]) // 2])  # killed mid-write
    done_before = {json.loads(lines[0])["id"], json.loads(lines[1])["id"]}
    assert _gen(llama_dir, inp, str(partial), "--batch-size", "1", "--num-beams", "1") == 0
    rows = _read(partial)
    assert sorted(r["id"] for r in rows) == sorted(reference)  # each id exactly once, nothing half-written
    assert {r["id"] for r in rows[:2]} == done_before
    assert all(r == reference[r["id"]] for r in rows)


def test_a_sampling_run_resumed_inside_a_batch_draws_what_an_uninterrupted_run_draws(tmp_path, llama_dir):
    """Each batch's seed comes from its ids: a resumed run forms the batches over all the records and
    skips the done ones, so the records left of a batch keep their batch and seed."""
    inp = _write_input(tmp_path / "in.jsonl", _records(7))
    options = ("--batch-size", "3", "--do-sample", "--seed", "5", "--num-beams", "1", "--compare")
    full = str(tmp_path / "full.jsonl")
    assert _gen(llama_dir, inp, full, *options) == 0
    reference = _read(full)
    partial = tmp_path / "partial.jsonl"
    partial.write_text("".join(json.dumps(r) + "\n" for r in reference[1::3]))  # a few of several batches
    assert _gen(llama_dir, inp, str(partial), *options) == 0
    assert _read(partial) == reference


def test_naming_the_default_dtype_resumes_a_run_that_did_not(tmp_path, llama_dir, capsys):
    inp = _write_input(tmp_path / "in.jsonl", _records(2))
    out = str(tmp_path / "out.jsonl")
    assert _gen(llama_dir, inp, out, "--num-beams", "1") == 0
    assert _gen(llama_dir, inp, out, "--num-beams", "1", "--dtype", "float32") == 0  # the same run
    assert "nothing to do" in capsys.readouterr().out or len(_read(out)) == 2
    assert _gen(llama_dir, inp, out, "--num-beams", "1", "--dtype", "bfloat16") == 1  # another one
    assert "dtype" in capsys.readouterr().err


def test_resume_with_everything_done_does_not_load_the_model(tmp_path, llama_dir, capsys):
    model_dir = tmp_path / "model"
    shutil.copytree(llama_dir, model_dir)
    inp = _write_input(tmp_path / "in.jsonl", _records(2))
    out = str(tmp_path / "out.jsonl")
    assert _gen(str(model_dir), inp, out, "--num-beams", "1") == 0
    before = open(out).read()
    # Same settings (the model name is part of them), but the folder is gone: it must not be needed.
    shutil.rmtree(model_dir)
    assert main(["generate", "--model", str(model_dir), "--input", inp, "--output", out, "--max-new-tokens", "6",
                 "--num-beams", "1"]) == 0  # not --quiet: the line below is a status line
    assert open(out).read() == before
    assert "nothing to do" in capsys.readouterr().err


def test_resume_with_other_settings_is_refused(tmp_path, llama_dir, capsys):
    inp = _write_input(tmp_path / "in.jsonl", _records(3))
    out = tmp_path / "out.jsonl"
    first = _records(3)[:1]
    assert _gen(llama_dir, _write_input(tmp_path / "one.jsonl", first), str(out), "--num-beams", "1") == 0
    before = out.read_text()
    assert _gen(llama_dir, inp, str(out), "--num-beams", "1", "--alpha", "0.3") == 1
    err = capsys.readouterr().err
    assert f"other settings (alpha: {defaults.ALPHA:g} in the file, 0.3 now)" in err and f"{out}:1" in err
    assert out.read_text() == before


@pytest.mark.parametrize(
    "bad_line, message",
    [
        ('{"id": "x", "document": "d", "history": ["hi"]', "not valid JSON (the line ends before the record does"),
        ('{"id": "x" "document": "d", "history": ["hi"]}', "not valid JSON (Expecting ',' delimiter at column 12)"),
        ('{"id": "x", "document": "d"}', "missing field 'history'"),
        ('{"id": "x", "document": "d", "history": "hi"}', "'history' must be a list"),
        ('{"id": "x", "document": "d", "history": []}', "'history' is empty"),
        ('{"id": "x", "document": 3, "history": ["hi"]}', "'document' must be a string"),
        ('{"id": "d0", "document": "d", "history": ["hi"]}', "duplicate id 'd0'"),
        ('["not", "an", "object"]', "expected a JSON object"),
    ],
)
def test_malformed_line_names_file_and_line_and_writes_nothing(tmp_path, llama_dir, capsys, bad_line, message):
    good = [json.dumps(r) for r in _records(2)]
    inp = tmp_path / "in.jsonl"
    inp.write_text(good[0] + "\n\n" + good[1] + "\n" + bad_line + "\n")  # blank line 2 is allowed
    out = tmp_path / "out.jsonl"
    assert _gen(llama_dir, str(inp), str(out)) == 1
    err = capsys.readouterr().err
    assert f"{inp}:4" in err and message in err
    assert "Traceback" not in err
    assert not out.exists()


def test_a_file_in_another_encoding_names_its_line_and_a_byte_order_mark_is_read(tmp_path, llama_dir, capsys):
    good = [json.dumps(r) for r in _records(2)]
    latin = tmp_path / "latin.jsonl"
    latin.write_bytes((good[0] + "\n" + json.dumps(dict(_records(3)[2], document="Café au lait"),
                                                   ensure_ascii=False) + "\n").encode("latin-1"))
    assert _gen(llama_dir, str(latin), str(tmp_path / "out.jsonl")) == 1
    err = capsys.readouterr().err
    assert f"{latin}:2: not UTF-8 text" in err and "save the file as UTF-8" in err and "Traceback" not in err
    marked = tmp_path / "bom.jsonl"
    marked.write_bytes(("\n".join(good) + "\n").encode("utf-8-sig"))
    assert [r["id"] for r in read_dialogues_jsonl(marked)] == ["d0", "d1"]


def test_read_dialogues_reports_the_first_bad_line(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text('{"id": 1, "document": "d", "history": ["a"]}\n{"id": 2, "document": "d", "history": ["a", 5]}\n')
    with pytest.raises(DialogueFileError, match=r"d\.jsonl:2: 'history'\[1\] must be a string"):
        read_dialogues_jsonl(path)


def test_read_done_ids_keeps_a_complete_last_line_without_newline(tmp_path):
    path = tmp_path / "out.jsonl"
    path.write_text('{"id": "a"}\n{"id": "b"}')
    assert read_done_ids(path) == {"a", "b"}
    assert path.read_text() == '{"id": "a"}\n{"id": "b"}\n'


@pytest.mark.parametrize(
    "flag, value, message",
    [("--alpha", "1.5", "--alpha must be in [0, 1]"), ("--p", "0", "--p must be in (0, 1]"),
     ("--num-beams", "0", "--num-beams must be >= 1"), ("--batch-size", "x", "--batch-size must be an integer")],
)
def test_out_of_range_arguments_are_named(tmp_path, capsys, flag, value, message):
    with pytest.raises(SystemExit) as exc:
        main(["generate", "--input", "a", "--output", "b", flag, value])
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_sampling_with_a_seed_is_reproducible(tmp_path, llama_dir):
    inp = _write_input(tmp_path / "in.jsonl", _records(3))
    outs = []
    for name in ("a", "b"):
        out = str(tmp_path / f"{name}.jsonl")
        assert _gen(llama_dir, inp, out, "--do-sample", "--seed", "7", "--num-beams", "1", "--compare", "--p", "1") == 0
        outs.append(sorted(_read(out), key=lambda r: r["id"]))
    assert outs[0] == outs[1]
    other = str(tmp_path / "c.jsonl")
    assert _gen(llama_dir, inp, other, "--do-sample", "--seed", "8", "--num-beams", "1", "--compare", "--p", "1") == 0
    assert sorted(_read(other), key=lambda r: r["id"]) != outs[0]  # the seed is actually used


@pytest.mark.parametrize("kind, chat", [("bart", False), ("llama", True)])
def test_generate_on_seq2seq_and_chat_template_models(tmp_path, kind, chat):
    folder = _save(tmp_path, kind, chat=chat)
    inp = _write_input(tmp_path / "in.jsonl", _records(2))
    out = str(tmp_path / "out.jsonl")
    assert _gen(folder, inp, out, "--num-beams", "2", "--compare") == 0
    rows = _read(out)
    assert len(rows) == 2 and all(isinstance(r["pmi_response"], str) for r in rows)


def test_missing_model_folder_is_a_clear_error(tmp_path, capsys):
    inp = _write_input(tmp_path / "in.jsonl", _records(1))
    assert _gen(str(tmp_path / "no-such-model"), inp, str(tmp_path / "out.jsonl")) == 1
    err = capsys.readouterr().err
    assert "no-such-model" in err and "Traceback" not in err


def test_shipped_demo_dialogues_are_valid_and_small():
    path = demo_dialogues_path()
    records = read_dialogues_jsonl(path)
    assert 4 <= len(records) <= 10
    assert path.stat().st_size < 10_000
    assert all(r["document"] and r["response"] for r in records)
    sources = {r["id"].split("-")[0] for r in records}
    assert sources == {"topicalchat", "multidoc2dial"}


def test_demo_prints_both_responses_side_by_side_with_gains(llama_dir):
    printed = []
    model, tokenizer = load_model_and_tokenizer(llama_dir, device="cpu")
    outputs = run_demo(
        model_name="tiny", num_beams=2, max_new_tokens=5, width=100, print_fn=printed.append,
        model_and_tokenizer=(model, tokenizer),
    )
    text = "\n".join(printed)
    records = read_dialogues_jsonl(demo_dialogues_path())
    assert [o["id"] for o in outputs] == [r["id"] for r in records]
    for rec, out in zip(records, outputs):
        assert rec["id"] in text and rec["history"][-1].split()[0] in text
        assert isinstance(out["plain_gain"], float) and isinstance(out["pmi_gain"], float)
    assert "PLAIN (beam search, 2 beams)" in text and "PMI-DECODE (alpha=0.5, p=0.9)" in text
    assert "Mean gain" in text


def test_demo_command_runs_on_a_local_model(llama_dir, capsys):
    assert main(["demo", "--model", llama_dir, "--num-beams", "1", "--max-new-tokens", "3", "--width", "80"]) == 0
    assert "Document: " in capsys.readouterr().out


def test_truncation_is_reported_once_per_file_not_once_per_batch(caplog):
    import logging

    from pmi_decode.batch.decode import decode_records

    model, tok = tiny_model("llama"), tiny_tokenizer("llama")
    records = [dict(r, document=r["document"] * 20) for r in _records(6)]
    with caplog.at_level(logging.WARNING):
        outs = list(decode_records(records, model, tok, num_beams=2, max_new_tokens=3, batch_size=2, max_length=40,
                                   progress=False))
    warnings = [r.getMessage() for r in caplog.records if "truncated" in r.getMessage() or "were cut" in r.getMessage()]
    assert warnings == ["6 of 6 dialogues were cut to max_length=40 prompt tokens (document first; "
                        "see each record's 'truncated')"]
    assert all(o["truncated"]["document_truncated"] for o in outs)


@pytest.mark.parametrize("extra", [["--compare"], ["--max-history-turns", "1"], ["--max-input-length", "64"],
                                   ["--chat-template", "off"], ["--batch-size", "3"], ["--dtype", "bfloat16"]])
def test_resume_refuses_any_option_that_changes_the_records(tmp_path, llama_dir, capsys, extra):
    out = tmp_path / "out.jsonl"
    assert _gen(llama_dir, _write_input(tmp_path / "one.jsonl", _records(1)), str(out), "--num-beams", "1") == 0
    before = out.read_text()
    assert _gen(llama_dir, _write_input(tmp_path / "in.jsonl", _records(3)), str(out), "--num-beams", "1", *extra) == 1
    err = capsys.readouterr().err
    assert "other settings" in err and "Traceback" not in err
    named = {"--compare": "compare", "--max-history-turns": "max_history_turns", "--max-input-length":
             "max_input_length", "--chat-template": "chat_template", "--batch-size": "batch_size", "--dtype": "dtype"}
    assert f"({named[extra[0]]}: " in err and err.count(" in the file, ") == 1  # only the differing key
    assert out.read_text() == before


def test_progress_moves_within_a_batch_per_decoding_step():
    from pmi_decode.batch.decode import decode_records

    model, tok = tiny_model("llama"), tiny_tokenizer("llama")
    seen = []
    outs = list(decode_records(_records(3), model, tok, num_beams=2, max_new_tokens=4, batch_size=8,
                               compare=True, progress=lambda done, total: seen.append((done, total))))
    assert len(outs) == 3
    assert all(total == 3 for _, total in seen)
    done = [d for d, _ in seen]
    assert done == sorted(done) and done[-1] == 3
    # one batch of 3, two generate calls of up to 4 steps: the count moves before the batch ends
    assert len([d for d in done if 0 < d < 3]) >= 4
    assert done[0] == pytest.approx(3 / 8)


def test_the_command_shows_a_bar_counted_in_dialogues(tmp_path, llama_dir, capsys):
    inp = _write_input(tmp_path / "in.jsonl", _records(3))
    assert main(["generate", "--model", llama_dir, "--input", inp, "--output", str(tmp_path / "o.jsonl"),
                 "--max-new-tokens", "2", "--num-beams", "1", "--batch-size", "2"]) == 0
    assert "3.0/3 dialogues" in capsys.readouterr().err


def test_output_under_a_file_is_a_clear_error(tmp_path, llama_dir, capsys):
    blocker = tmp_path / "results"
    blocker.write_text("I am a file")
    inp = _write_input(tmp_path / "in.jsonl", _records(1))
    assert _gen(llama_dir, inp, str(blocker / "out.jsonl")) == 1
    err = capsys.readouterr().err
    assert f"{blocker} is a file, not a folder" in err and "Errno" not in err
    assert _gen(llama_dir, inp, str(tmp_path)) == 1
    assert "is a folder; give a file name" in capsys.readouterr().err


def test_score_output_under_a_file_is_a_clear_error(tmp_path, capsys):
    blocker = tmp_path / "results"
    blocker.write_text("I am a file")
    inp = _write_input(tmp_path / "in.jsonl", [dict(_records(1)[0], pmi_response="x")])
    assert main(["score", "--input", inp, "--output", str(blocker / "s.jsonl"), "--metrics", "knowledge_f1"]) == 1
    assert f"{blocker} is a file, not a folder" in capsys.readouterr().err
    # the input itself as output: refused, and the input is left as it was
    before = open(inp).read()
    assert main(["score", "--input", inp, "--output", inp, "--metrics", "knowledge_f1"]) == 1
    assert "--output must differ from --input" in capsys.readouterr().err and open(inp).read() == before
    # a summary in a folder not made yet: made
    summary = tmp_path / "new" / "means.json"
    assert main(["score", "--input", inp, "--output", str(tmp_path / "s.jsonl"), "--metrics", "knowledge_f1",
                 "--summary", str(summary)]) == 0
    assert json.loads(summary.read_text())["metrics"] == ["knowledge_f1"]
    # the summary written over the input or the output: refused before anything is scored
    for taken, flag in ((inp, "--input"), (str(tmp_path / "s2.jsonl"), "--output")):
        assert main(["score", "--input", inp, "--output", str(tmp_path / "s2.jsonl"), "--metrics", "knowledge_f1",
                     "--summary", taken]) == 1
        assert f"--summary must differ from {flag}" in capsys.readouterr().err
    assert open(inp).read() == before and not (tmp_path / "s2.jsonl").exists()


def test_a_metric_whose_package_is_missing_is_one_line(tmp_path, capsys, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "bert_score", None)  # as if not installed
    inp = _write_input(tmp_path / "in.jsonl", [dict(_records(1)[0], pmi_response="x")])
    assert main(["score", "--input", inp, "--output", str(tmp_path / "s.jsonl"), "--metrics", "bertscore"]) == 1
    err = capsys.readouterr().err
    assert "needs the bert-score package" in err and "Traceback" not in err


def test_a_hub_id_fails_at_once_when_offline(tmp_path, capsys, monkeypatch):
    import time

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # an empty cache
    inp = _write_input(tmp_path / "in.jsonl", _records(1))
    start = time.monotonic()
    assert _gen("some-org/not-a-cached-model", inp, str(tmp_path / "out.jsonl")) == 1
    assert time.monotonic() - start < 5
    err = capsys.readouterr().err
    assert "'some-org/not-a-cached-model'" in err and "HF_HUB_OFFLINE is set" in err and "Traceback" not in err


def test_a_hub_id_fails_at_once_when_the_hub_cannot_be_reached(tmp_path, monkeypatch):
    import time

    from pmi_decode.models import ModelNotAvailableError, fail_fast_if_offline

    from huggingface_hub import constants

    # huggingface_hub reads HF_HUB_OFFLINE and HF_ENDPOINT once, at import: set what it read
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE",  # nothing listens there: refused at once
                        "http://127.0.0.1:9/{repo_id}/resolve/{revision}/{filename}")
    start = time.monotonic()
    with pytest.raises(ModelNotAvailableError, match="the Hugging Face hub cannot be reached"):
        fail_fast_if_offline("some-org/not-a-cached-model")
    assert time.monotonic() - start < 5
    assert fail_fast_if_offline(str(tmp_path)) == str(tmp_path)  # local folders never look at the network


# ---------------------------------------------------------------------------- inputs, order, quiet
def test_output_follows_the_input_order_even_when_resumed(tmp_path, llama_dir):
    """decode_records goes by prompt length; the file must read in input order (shortest first here)."""
    records = sorted(_records(6), key=lambda r: len(r["document"]) + sum(map(len, r["history"])))
    inp = _write_input(tmp_path / "in.jsonl", records)
    out = tmp_path / "out.jsonl"
    assert _gen(llama_dir, _write_input(tmp_path / "part.jsonl", records[3:]), str(out), "--num-beams", "1",
                "--batch-size", "2") == 0
    assert _gen(llama_dir, inp, str(out), "--num-beams", "1", "--batch-size", "2") == 0
    assert [r["id"] for r in _read(out)] == [r["id"] for r in records]
    from pmi_decode.batch.decode import decode_records

    model, tok = load_model_and_tokenizer(llama_dir, device="cpu")
    by_length = [o["id"] for o in decode_records(records, model, tok, num_beams=1, max_new_tokens=2, batch_size=2,
                                                 progress=False)]
    assert by_length != [r["id"] for r in records]  # so the order above is the file's doing


def test_an_empty_document_is_refused_with_the_line(tmp_path, llama_dir, capsys):
    records = _records(2)
    records[1]["document"] = "   "
    out = tmp_path / "out.jsonl"
    assert _gen(llama_dir, _write_input(tmp_path / "in.jsonl", records), str(out)) == 1
    err = capsys.readouterr().err
    assert "in.jsonl:2: 'document' is empty" in err and "plain decoding" in err
    assert not out.exists()


def test_decode_records_warns_about_empty_documents(llama_dir, caplog):
    from pmi_decode.batch.decode import decode_records

    model, tok = load_model_and_tokenizer(llama_dir, device="cpu")
    records = _records(2)
    records[0]["document"] = ""
    with caplog.at_level("WARNING", logger="pmi_decode.batch.decode"):
        list(decode_records(records, model, tok, num_beams=1, max_new_tokens=2, progress=False))
    assert "1 of 2 dialogues have an empty document" in caplog.text and "d0" in caplog.text


def _dataset(records):
    from pmi_decode.data.hf_datasets import to_dataset

    return to_dataset(records)


def test_generate_reads_a_saved_dataset_and_a_dataset_dict(tmp_path, llama_dir):
    datasets = pytest.importorskip("datasets")
    records = _records(3)
    from_jsonl = tmp_path / "a.jsonl"
    assert _gen(llama_dir, _write_input(tmp_path / "in.jsonl", records), str(from_jsonl), "--num-beams", "1") == 0
    _dataset(records).save_to_disk(tmp_path / "ds")
    from_disk = tmp_path / "b.jsonl"
    assert _gen(llama_dir, str(tmp_path / "ds"), str(from_disk), "--num-beams", "1") == 0
    # a Dataset has every column: no meta and no response read back as {} and None
    strip = lambda rows: [{k: v for k, v in r.items() if k != "meta" and v is not None} for r in rows]  # noqa: E731
    assert strip(_read(from_disk)) == strip(_read(from_jsonl))
    assert all(r["meta"] == {} for r in _read(from_disk))
    datasets.DatasetDict({"test": _dataset(records[:2]), "train": _dataset(records)}).save_to_disk(tmp_path / "dd")
    assert _gen(llama_dir, str(tmp_path / "dd"), str(tmp_path / "c.jsonl"), "--num-beams", "1") == 1
    assert _gen(llama_dir, str(tmp_path / "dd"), str(tmp_path / "c.jsonl"), "--num-beams", "1",
                "--split", "test") == 0
    assert [r["id"] for r in _read(tmp_path / "c.jsonl")] == ["d0", "d1"]


def test_dataset_rows_are_validated_like_lines(tmp_path, capsys):
    pytest.importorskip("datasets")
    records = _records(2)
    records[1]["document"] = ""
    _dataset(records).save_to_disk(tmp_path / "ds")
    assert main(["generate", "--input", str(tmp_path / "ds"), "--output", str(tmp_path / "o.jsonl")]) == 1
    assert f"{tmp_path / 'ds'}, row 1: 'document' is empty" in capsys.readouterr().err


def test_an_unknown_hub_data_set_offline_is_a_clear_error(tmp_path, capsys):
    pytest.importorskip("datasets")
    assert main(["generate", "--input", "some-org/no-such-data", "--output", str(tmp_path / "o.jsonl")]) == 1
    assert "needs --split" in capsys.readouterr().err
    assert main(["generate", "--input", "some-org/no-such-data", "--split", "test",
                 "--output", str(tmp_path / "o.jsonl")]) == 1
    err = capsys.readouterr().err
    assert "'some-org/no-such-data' [test] could not be loaded (HF_HUB_OFFLINE is set" in err and "Traceback" not in err


def test_quiet_prints_nothing_but_errors(tmp_path, llama_dir, capfd):
    inp = _write_input(tmp_path / "in.jsonl", _records(2))
    args = ["generate", "--model", llama_dir, "--input", inp, "--max-new-tokens", "3", "--num-beams", "1"]
    assert main(args + ["--output", str(tmp_path / "loud.jsonl")]) == 0
    loud = capfd.readouterr()
    assert "Loading weights" in loud.err and "wrote 2 dialogues" in loud.err  # what --quiet must hide
    assert main(args + ["--output", str(tmp_path / "quiet.jsonl"), "--quiet"]) == 0
    quiet = capfd.readouterr()
    assert quiet.out == "" and quiet.err == ""
    import logging

    from transformers.utils import logging as hf_logging

    assert hf_logging.is_progress_bar_enabled() and logging.getLogger("pmi_decode").level == logging.NOTSET


@pytest.mark.parametrize("mode", [["--num-beams", "3"], ["--num-beams", "1", "--do-sample", "--seed", "3"]])
def test_packed_gives_the_paired_paths_responses(tmp_path, llama_dir, mode):
    """--packed on / off / auto (both halves in one row, or a stacked batch) with the command's
    guards and defaults: the same records; only an explicit "on" is written to the settings."""
    inp = _write_input(tmp_path / "in.jsonl", _records(4))
    outs = []
    for extra in (["--packed", "off"], ["--packed", "on"], []):
        out = str(tmp_path / f"out{len(outs)}.jsonl")
        assert _gen(llama_dir, inp, out, "--batch-size", "2", *mode, *extra) == 0
        outs.append(_read(out))
    assert [r["pmi_response"] for r in outs[0]] == [r["pmi_response"] for r in outs[1]]
    assert [r["pmi_response"] for r in outs[0]] == [r["pmi_response"] for r in outs[2]]
    assert outs[1][0]["settings"]["packed"] is True
    assert "packed" not in outs[0][0]["settings"] and "packed" not in outs[2][0]["settings"]


def test_packed_on_a_model_that_cannot_take_it_is_a_clear_error(tmp_path, capsys):
    folder = _save(tmp_path, "bart")
    inp = _write_input(tmp_path / "in.jsonl", _records(1))
    assert _gen(folder, inp, str(tmp_path / "out.jsonl"), "--packed", "on") != 0
    assert "the packed path cannot be used here: an encoder-decoder model" in capsys.readouterr().err


# ---------------------------------------------------------------------------- resuming a changed input
def test_resume_refuses_an_input_whose_dialogues_changed(tmp_path, llama_dir, capsys):
    """Same ids, another document (or history, or gold response): the old responses must not be
    kept as if they answered the new input."""
    records = _records(4)
    out = tmp_path / "out.jsonl"
    assert _gen(llama_dir, _write_input(tmp_path / "in.jsonl", records), str(out), "--num-beams", "1") == 0
    before = out.read_text()
    for field, value in (("document", "Another document."), ("history", ["Another question?"]),
                         ("response", "another gold")):
        changed = [dict(r) for r in records]
        changed[2][field] = value
        assert _gen(llama_dir, _write_input(tmp_path / "changed.jsonl", changed), str(out), "--num-beams", "1") == 1
        err = capsys.readouterr().err
        assert "1 of the 4 dialogues already decoded" in err and "first: id 'd2'" in err, err
        assert "write to a new --output" in err
        assert out.read_text() == before


def test_resume_warns_once_about_records_no_longer_in_the_input(tmp_path, llama_dir, caplog):
    records = _records(4)
    out = tmp_path / "out.jsonl"
    assert _gen(llama_dir, _write_input(tmp_path / "in.jsonl", records), str(out), "--num-beams", "1") == 0
    assert main(["generate", "--model", llama_dir, "--input", _write_input(tmp_path / "two.jsonl", records[:2]),
                 "--output", str(out), "--max-new-tokens", "6", "--num-beams", "1"]) == 0
    assert caplog.text.count("2 records have ids that are not in the input any more") == 1, caplog.text
    assert [r["id"] for r in _read(out)] == [r["id"] for r in records], "they are kept"


def test_resume_refuses_an_output_that_holds_an_id_twice(tmp_path, llama_dir, capsys):
    """Two runs on one --output at once write every id twice; a rerun must not take that file as done."""
    inp = _write_input(tmp_path / "in.jsonl", _records(2))
    out = tmp_path / "out.jsonl"
    assert _gen(llama_dir, inp, str(out), "--num-beams", "1") == 0
    out.write_text(out.read_text() * 2)
    assert _gen(llama_dir, inp, str(out), "--num-beams", "1") == 1
    err = capsys.readouterr().err
    assert f"{out}:3: id 'd0' is in this output twice (first on line 1)" in err and "new --output" in err
    with pytest.raises(DialogueFileError, match="twice"):
        read_done_ids(out)


def test_an_unpaired_surrogate_is_refused_with_the_line_before_the_model_loads(tmp_path, capsys):
    """"\\ud800" is valid JSON but no text: it used to end in a tokenizer traceback."""
    good = json.dumps(_records(1)[0])
    inp = tmp_path / "in.jsonl"
    for bad in ('{"id": "x", "document": "D\\ud800x", "history": ["hi"]}',
                '{"id": "x", "document": "D", "history": ["hi", "a\\udc00"]}'):
        inp.write_text(good + "\n" + bad + "\n")
        # no such model: the input is refused before any model is looked for
        assert _gen(str(tmp_path / "no-model"), str(inp), str(tmp_path / "out.jsonl")) == 1
        err = capsys.readouterr().err
        assert f"{inp}:2: '" in err and "not valid text (unpaired surrogate" in err and "Traceback" not in err, err
    with pytest.raises(DialogueFileError, match=r"'history\[1\]' is not valid text"):
        read_dialogues_jsonl(inp)


def test_a_last_turn_longer_than_max_length_names_its_dialogue(tmp_path, llama_dir, capsys):
    records = _records(3)
    records[1]["history"] = ["word " * 200]
    assert _gen(llama_dir, _write_input(tmp_path / "in.jsonl", records), str(tmp_path / "out.jsonl"),
                "--max-input-length", "32") == 1
    err = capsys.readouterr().err
    assert "dialogue id 'd1'" in err and "does not fit in max_length=32" in err, err


def test_an_interrupted_score_says_nothing_was_kept(tmp_path, capsys, monkeypatch):
    """One-process scoring keeps nothing of a stopped run: the message must not promise a resume,
    and the output is written whole or not at all."""
    import pmi_decode.batch.scoring as scoring

    inp = _write_input(tmp_path / "in.jsonl", [dict(r, pmi_response="an answer") for r in _records(2)])
    out = tmp_path / "scored.jsonl"
    out.write_text("the old file\n")

    def stopped(*args, **kwargs):
        yield {"id": "d0"}
        raise KeyboardInterrupt

    monkeypatch.setattr(scoring, "score_records", lambda records, metrics, **kw: stopped())
    assert main(["score", "--input", inp, "--output", str(out), "--metrics", "knowledge_f1"]) == 130
    err = capsys.readouterr().err
    assert "interrupted; nothing was written" in err and "resume" not in err, err
    assert out.read_text() == "the old file\n", "an interrupted write leaves the old file whole"
    assert [p.name for p in tmp_path.iterdir()] and not list(tmp_path.glob("*.writing"))


def test_q2_models_that_cannot_be_loaded_are_named_before_scoring(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # an empty cache
    inp = _write_input(tmp_path / "in.jsonl", [dict(_records(1)[0], pmi_response="x")])
    out = tmp_path / "s.jsonl"
    assert main(["score", "--input", inp, "--output", str(out), "--metrics", "knowledge_f1,q2",
                 "--q2-qa", str(tmp_path / "no-such-folder")]) == 1
    err = capsys.readouterr().err
    assert "--q2-qg 'mrm8488/t5-base-finetuned-question-generation-ap'" in err and "--q2-qa" in err
    assert "nothing was scored" in err and not out.exists()


def test_an_interrupted_demo_promises_no_resume(capsys, monkeypatch):
    import pmi_decode.demo as demo

    def stopped(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(demo, "run_demo", stopped)
    assert main(["demo"]) == 130
    err = capsys.readouterr().err
    assert "the demo keeps nothing of a stopped run" in err and "resume" not in err, err
