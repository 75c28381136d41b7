"""The README's demo numbers come from the committed demo run, made with the demo's current defaults."""

import importlib.util
import json
from pathlib import Path

import pytest

from tiny_models import saved_tiny_model

from pmi_decode.cli import main

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("readme_demo", ROOT / "eval" / "readme_demo.py")
readme_demo = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(readme_demo)

RUN = json.loads(readme_demo.RUN.read_text(encoding="utf-8"))


def test_the_readme_shows_what_the_committed_run_made():
    shown = readme_demo.current_block((ROOT / "README.md").read_text(encoding="utf-8"))
    assert shown is not None, "README.md lost its demo-run markers"
    assert shown == readme_demo.block(RUN), "README demo part is stale: run python eval/readme_demo.py --write"


def test_the_committed_run_is_whole_and_its_text_output_agrees():
    records = RUN["records"]
    assert len(records) == 6 and all(r["plain_response"] and r["pmi_response"] for r in records)
    for key, field in (("plain", "plain_gain"), ("pmi", "pmi_gain")):
        assert abs(RUN["mean_gain"][key] - sum(r[field] for r in records) / 6) < 1e-9
    text = (ROOT / "docs" / "results" / "cli" / "demo_output.txt").read_text(encoding="utf-8")
    assert f"Mean gain: plain {RUN['mean_gain']['plain']:+.1f}, PMI-Decode {RUN['mean_gain']['pmi']:+.1f}" in text
    for r in records:
        assert f"[gain {r['plain_gain']:+.1f}]" in text and f"[gain {r['pmi_gain']:+.1f}]" in text


@pytest.mark.real_defaults
def test_the_committed_run_used_the_demos_current_defaults(tmp_path, capsys):
    """A change to the demo's defaults (guards, alpha, beams, lengths) makes the committed run stale:
    the same command on a tiny model must write the same settings, the model name aside."""
    folder = saved_tiny_model(tmp_path / "tiny")
    assert main(["demo", "--model", folder, "--width", "110", "--save", str(tmp_path / "run.json")]) == 0
    capsys.readouterr()
    now = json.loads((tmp_path / "run.json").read_text())["settings"]
    assert now.pop("model") == folder
    committed = dict(RUN["settings"])
    assert committed.pop("model") == "embedded"
    assert now == committed
