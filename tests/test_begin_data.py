"""BEGIN TSV reader on a fixture cut from the real dev files (CRLF line ends, as published)."""

from pathlib import Path

import pytest

from pmi_decode.data.begin import BeginFormatError, read_begin, read_begin_files

FIXTURES = Path(__file__).parent / "fixtures" / "begin"
HEADER = "model_name\tdata_source\tknowledge\tmessage\tresponse\tbegin_label\n"


def test_reads_the_real_format():
    examples = read_begin(FIXTURES / "begin_dev_wow.tsv")
    assert len(examples) == 4
    first = examples[0]
    assert first.data_source == "wow"
    assert first.model_name in {"t5", "ctrl", "gpt2", "doha"}
    assert first.begin_label == "Fully attributable" and first.faithful
    assert first.history == [first.message]
    assert not first.response.endswith("\r") and not first.begin_label.endswith("\r")
    assert first.line == 2 and first.file.endswith("begin_dev_wow.tsv")


def test_all_sources_and_labels():
    examples = read_begin_files(sorted(FIXTURES.glob("begin_dev_*.tsv")))
    assert {e.data_source for e in examples} == {"cmu", "tc", "wow"}
    assert {e.begin_label for e in examples} == {"Fully attributable", "Not fully attributable", "Generic"}
    assert sum(e.faithful for e in examples) == 6
    assert not any(e.faithful for e in examples if e.begin_label == "Generic")


def test_quotes_are_kept_verbatim(tmp_path):
    path = tmp_path / "q.tsv"
    path.write_text(HEADER + 't5\twow\tsays "hi\tok "yes\tHe said "hello"\tFully attributable\n')
    (example,) = read_begin(path)
    assert example.knowledge == 'says "hi' and example.response == 'He said "hello"'


@pytest.mark.parametrize(
    "body, message",
    [
        ("t5\twow\tdoc\tmsg\tresp\tMaybe\n", r"line 2: unknown begin_label 'Maybe'"),
        ("t5\twow\tdoc\tmsg\tresp\tGeneric\nt5\twow\tdoc\tresp\tGeneric\n", "line 3: expected 6 tab-separated fields, found 5"),
        ("t5\twow\tdoc\tmsg\t\tGeneric\n", "line 2: empty response"),
        ("", "no data rows"),
    ],
)
def test_malformed_rows_name_file_and_line(tmp_path, body, message):
    path = tmp_path / "bad.tsv"
    path.write_text(HEADER + body)
    with pytest.raises(BeginFormatError, match=message) as info:
        read_begin(path)
    assert "bad.tsv" in str(info.value)


def test_bad_header_and_missing_file(tmp_path):
    path = tmp_path / "h.tsv"
    path.write_text("model\tsource\n")
    with pytest.raises(BeginFormatError, match=r"h.tsv, line 1: header lacks column\(s\) model_name"):
        read_begin(path)
    empty = tmp_path / "e.tsv"
    empty.write_text("")
    with pytest.raises(BeginFormatError, match="empty"):
        read_begin(empty)
    with pytest.raises(FileNotFoundError, match="nope.tsv"):
        read_begin(tmp_path / "nope.tsv")
