"""eval/studies/same_responses.py: the check behind "outputs unchanged" must see a changed
response and refuse records decoded with other settings or for other ids."""

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "eval" / "studies" / "same_responses.py"
spec = importlib.util.spec_from_file_location("same_responses", SCRIPT)
same_responses = importlib.util.module_from_spec(spec)
spec.loader.exec_module(same_responses)

SETTINGS = {"alpha": 0.5, "p": 0.9}
COMMITTED = {"system": "s", "settings": SETTINGS,
             "scores": [{"id": "a", "response": "One."}, {"id": "b", "response": "Two."}, {"id": 3, "response": "x"}]}


def _row(rid, text, settings=SETTINGS):
    return {"id": rid, "pmi_response": text, "settings": settings}


def test_equal_and_changed_responses_are_counted():
    report = same_responses.compare(COMMITTED, [_row("a", "One."), _row("b", "Two!"), _row(3, "x")])
    assert (report["compared"], report["equal"], report["different_ids"]) == (3, 2, ["b"])


def test_a_partial_run_compares_what_it_holds():
    report = same_responses.compare(COMMITTED, [_row("b", "Two.")])
    assert (report["committed"], report["compared"], report["equal"]) == (3, 1, 1)


@pytest.mark.parametrize("rows, message", [
    ([_row("a", "One.", {"alpha": 0.25, "p": 0.9})], "other settings"),
    ([_row("z", "One.")], "not in the committed run"),
])
def test_other_settings_or_ids_are_refused(rows, message):
    with pytest.raises(SystemExit, match=message):
        same_responses.compare(COMMITTED, rows)
