"""pmi_decode.experiments.compare (eval/compare_decoding.py): the options a system gets, the goal
rule, the choice of the best system, paired differences, and a report built from score files
written as the score stage does."""

import json
from pathlib import Path

import pytest

from pmi_decode.experiments import compare as cd

ROOT = Path(__file__).resolve().parents[1]

CONFIG = {"guards": {"response_no_repeat_ngram_size": 3, "block_layout_markers": True}, "max_new_tokens": 8,
          "num_beams": 2}


def test_guard_options_per_system():
    plain = cd.system_config(CONFIG, {"alpha": 0})
    assert plain.response_no_repeat_ngram_size is None and plain.block_layout_markers is False
    guarded = cd.system_config(CONFIG, {"alpha": 0.5, "p": 0.9, "guards": True})
    assert guarded.response_no_repeat_ngram_size == 3 and guarded.block_layout_markers is True
    assert guarded.no_repeat_ngram_size is None
    own = cd.system_config(CONFIG, {"alpha": 0.5, "guards": {"no_repeat_ngram_size": 4}})
    assert own.no_repeat_ngram_size == 4 and own.response_no_repeat_ngram_size is None


def test_a_system_is_the_decode_config_the_old_options_gave():
    """The config's shared settings, the comparison's defaults (p 1, batches of 4) and the system's
    own options, in that order of precedence."""
    from pmi_decode.decode_config import DecodeConfig

    config = dict(CONFIG, seed=3, max_length=64, chat_template=True)
    got = cd.system_config(config, {"alpha": "adaptive:1:0.25", "normalize": True, "conditional_end": True,
                                    "plausibility": 0.2, "guards": True})
    assert got == DecodeConfig(alpha="adaptive:1:0.25", p=1.0, num_beams=2, max_new_tokens=8, seed=3, batch_size=4,
                               max_length=64, chat_template=True, response_no_repeat_ngram_size=3,
                               block_layout_markers=True, normalize_scores=True, conditional_end=True,
                               plausibility=0.2)
    assert cd.system_config(config, {"alpha": 0, "p": 0.5, "batch_size": 2}).p == 0.5


def test_unknown_system_options_are_refused(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("systems:\n  a: {alpha: 0.5, normalise: true}\n")
    with pytest.raises(SystemExit, match=r"system 'a': unknown option\(s\) \['normalise'\]"):
        cd.load_config(str(path))
    path.write_text("systems:\n  a: {alpha: 0.5, guards: {block_layout_marker: true}}\n")
    with pytest.raises(SystemExit, match=r"unknown option\(s\) \['block_layout_marker'\]"):
        cd.load_config(str(path))
    path.write_text("systems:\n  a: {alpha: 0.5, guards: {response_no_repeat_ngram_size: -1}}\n")
    with pytest.raises(SystemExit, match="system 'a': response_no_repeat_ngram_size must be an integer >= 0"):
        cd.load_config(str(path))


def test_the_shipped_comparison_configs_load():
    for path in sorted((ROOT / "configs").glob("compare_*.yaml")):
        config = cd.load_config(str(path))
        assert all(cd.system_config(config, system).max_new_tokens == config["max_new_tokens"]
                   for system in config["systems"].values())


def _rows(values: dict, n: int = 4) -> list[dict]:
    rows = []
    for i in range(n):
        row = {"id": str(i), "response": f"r{i}"}
        for key, _, _ in cd.MEASURES:
            value = values.get(key, 0.0)
            row[key] = value(i) if callable(value) else value
        rows.append(row)
    return rows


def _write(root: Path, name: str, rows: list[dict]) -> None:
    path = cd._paths({"output_dir": str(root)}, name)["scores"]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"system": name, "settings": {}, "n": len(rows), "scores": rows}))


def test_goal_rule_and_best_system(tmp_path):
    base = dict(cpmi_mean=0.0, knowledge_f1=0.05, rouge_l=0.10, ungrammatical=0.25, repeated_3gram_rate=0.05)
    systems = {
        "plain": base,
        # the reference: a faithfulness gain, but grammar 25 -> 50%
        "fixed-0.5": dict(base, cpmi_mean=0.3, knowledge_f1=0.10, ungrammatical=0.5, repeated_3gram_rate=0.0),
        # keeps the gain and meets every other goal
        "good": dict(base, cpmi_mean=0.35, knowledge_f1=0.12, rouge_l=0.095, ungrammatical=0.25,
                     repeated_3gram_rate=0.0),
        # larger gain, but ROUGE-L falls by more than 0.01 and a response leaks the layout
        "greedy-gain": dict(base, cpmi_mean=0.9, knowledge_f1=0.3, rouge_l=0.05, layout_leak=lambda i: float(i == 0)),
    }
    for name, values in systems.items():
        _write(tmp_path, name, _rows(values))
    config = {"output_dir": str(tmp_path), "systems": {name: {"alpha": 0} for name in systems}, "examples": 2}
    inputs = [{"id": str(i), "document": "d", "history": ["h"], "response": "g"} for i in range(4)]
    result = cd.report(config, inputs)
    goals = result["goals"]
    assert goals["good"]["passes"]
    assert not goals["fixed-0.5"]["checks"]["grammar"]
    assert not goals["greedy-gain"]["checks"]["rouge_l"] and not goals["greedy-gain"]["checks"]["no_leak"]
    assert {k: result["best"][k] for k in ("system", "meets_every_goal", "missed")} == \
        {"system": "good", "meets_every_goal": True, "missed": []}
    assert [e["system"] for e in result["best"]["ranking"]][0] == "good"
    md = (tmp_path / "comparison.md").read_text()
    assert "Best by the goal rule: **good**" in md
    diff = result["summary"]["greedy-gain"]["vs_baseline"]["cpmi_mean"]
    assert diff["diff"] == pytest.approx(0.9) and diff["ci95"] == pytest.approx(0.0) and diff["n"] == 4
    # Without a system meeting every goal, the one meeting most goals wins.
    (cd._paths(config, "good")["scores"]).unlink()
    config["systems"].pop("good")
    result = cd.report(config, inputs)
    assert result["best"]["system"] == "fixed-0.5" and result["best"]["missed"] == ["grammar"]
    # Equal counts of checks passed: the one closer to the goal it misses ranks first.
    _write(tmp_path, "closer", _rows(dict(systems["fixed-0.5"], ungrammatical=0.3, cpmi_mean=0.31)))
    config["systems"]["closer"] = {"alpha": 0}
    result = cd.report(config, inputs)
    ranking = result["best"]["ranking"]
    assert [e["system"] for e in ranking[:2]] == ["closer", "fixed-0.5"]
    assert ranking[0]["shortfall"] == {"grammar": pytest.approx(0.02)}
    assert ranking[1]["shortfall"] == {"grammar": pytest.approx(0.22)}


def test_report_against_another_baseline(tmp_path):
    """--baseline: the same scores judged against another system, written beside the main report."""
    base = dict(cpmi_mean=0.0, knowledge_f1=0.05, rouge_l=0.10, ungrammatical=0.0, repeated_3gram_rate=0.0)
    systems = {"plain": base, "plain+trim": dict(base, ungrammatical=0.25),
               "fixed-0.5": dict(base, cpmi_mean=0.3, knowledge_f1=0.1, ungrammatical=0.25)}
    for name, values in systems.items():
        _write(tmp_path, name, _rows(values))
    config = {"output_dir": str(tmp_path), "systems": {name: {"alpha": 0} for name in systems}, "examples": 1}
    inputs = [{"id": str(i), "document": "d", "history": ["h"], "response": "g"} for i in range(4)]
    assert not cd.report(config, inputs)["goals"]["fixed-0.5"]["checks"]["grammar"]
    config["baseline_override"] = "plain+trim"
    other = cd.report(config, inputs)
    assert other["baseline"] == "plain+trim" and other["goals"]["fixed-0.5"]["checks"]["grammar"]
    assert (tmp_path / "comparison_vs_plain+trim.json").is_file() and (tmp_path / "comparison.json").is_file()
    assert json.loads((tmp_path / "comparison.json").read_text())["baseline"] == "plain"


@pytest.mark.parametrize("flag", ["trim_unfinished", "prefer_finished"])
def test_response_choices_are_system_options(flag, tmp_path):
    assert getattr(cd.system_config(CONFIG, {"alpha": 0}), flag) is False
    assert getattr(cd.system_config(CONFIG, {"alpha": 0, flag: True}), flag) is True
    bad = tmp_path / "bad.yaml"
    bad.write_text(f"systems: {{plain: {{alpha: 0, {flag}: maybe}}}}\n")
    with pytest.raises(SystemExit, match=flag):
        cd.load_config(str(bad))


def test_paired_interval():
    base = [{"id": str(i), "x": 0.0} for i in range(3)]
    other = [{"id": str(i), "x": float(i)} for i in range(3)]  # differences 0, 1, 2
    out = cd.paired(base, other, "x")
    assert out["diff"] == pytest.approx(1.0) and out["n"] == 3
    assert out["ci95"] == pytest.approx(1.96 * 1.0 / 3 ** 0.5)


def test_select_turns_avoids_earlier_turns():
    records = list(range(1000))
    chosen = cd.select_turns(records, 40, avoid_first=24, avoid_sweep_turns=100)
    assert len(set(chosen)) == 40 and min(chosen) >= 24
    assert not set(chosen) & {int(i * 10) for i in range(100)}


def test_finished_part_and_unfinished():
    assert cd.finished_part("It was great. Then it") == "It was great."
    assert cd.finished_part('He said "yes." And') == 'He said "yes."'
    assert cd.finished_part("No end here") == ""
    assert cd.finished_part("Version 2.5 is out!") == "Version 2.5 is out!"  # "2.5" is no sentence end
    assert cd.unfinished("All done.") == 0.0 and cd.unfinished("All done. But") == 1.0
    assert cd.unfinished("Cut in the midd") == 1.0 and cd.unfinished("  ") == 1.0


def test_config_refuses_a_non_boolean_normalize(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("systems:\n  a: {alpha: 0.5, normalize: 'no'}\n")
    with pytest.raises(SystemExit, match="normalize must be true or false"):
        cd.load_config(str(path))
    path.write_text("systems:\n  a: {alpha: 0.5, normalize: true}\n")
    assert cd.system_config(CONFIG, cd.load_config(str(path))["systems"]["a"]).normalize_scores is True


def test_layout_leaks_see_markers_and_chat_role_lines():
    leaks = cd.layout_leaks(["Document: the FDA says", "Sure.\nuser\nWho invented comics?", "The user asked.", "Fine.",
                             "Document 2 Your children", "The Document says"])
    assert leaks == [1.0, 1.0, 0.0, 0.0, 1.0, 0.0]


def test_a_rerun_expects_the_settings_decode_records_writes(tmp_path):
    """The comparison resumes: the settings it checks finished files against are those
    decode_records stores, for plain and guarded systems alike."""
    from tiny_models import DIALOGUES, saved_tiny_model

    from pmi_decode.batch.decode import decode_records, decode_settings, read_done_ids, write_records
    from pmi_decode.models import load_model_and_tokenizer

    folder = saved_tiny_model(tmp_path / "tiny")
    model, tok = load_model_and_tokenizer(folder)
    config = dict(CONFIG, generator=folder, batch_size=2, max_length=64, max_history_turns=2, num_beams=2)
    records = [{"id": str(i), "document": d, "history": h} for i, (d, h) in enumerate(DIALOGUES)]
    for system in ({"alpha": 0}, {"alpha": 0.5, "p": 0.9, "guards": True, "conditional_end": True}):
        decoding = cd.system_config(config, system)
        path = tmp_path / f"{len(system)}.jsonl"
        write_records(path, decode_records(records, model, tok, decoding, model_name=folder, progress=False))
        assert read_done_ids(path, decode_settings(decoding, model_name=config["generator"])) == \
            {r["id"] for r in records}


class _Counting:
    """A stand-in checker (the re-grading is under test, not the checker): one error per "bad"."""

    name = "counting"

    def __init__(self, version):
        self.version = version

    def count_errors(self, texts):
        return [t.count("bad") for t in texts]


def test_regrade_updates_grammar_only_when_the_grading_changed(tmp_path):
    path = tmp_path / "scores.json"
    rows = [{"id": "0", "response": "bad start. It", "cpmi_mean": 0.5, "ungrammatical": 0.0},
            {"id": "1", "response": "All good.", "cpmi_mean": 0.1, "ungrammatical": 1.0}]
    path.write_text(json.dumps({"system": "s", "n": 2, "scores": rows}))
    assert cd.regrade(path, _Counting("v1"), None)
    data = json.loads(path.read_text())
    assert [r["ungrammatical"] for r in data["scores"]] == [1.0, 0.0]
    assert [r["unfinished"] for r in data["scores"]] == [1.0, 0.0]
    assert [r["ungrammatical_finished"] for r in data["scores"]] == [1.0, 0.0]  # "bad start." is finished
    assert [r["cpmi_mean"] for r in data["scores"]] == [0.5, 0.1], "the other scores are kept"
    assert data["grading"]["backend"] == "v1"
    assert not cd.regrade(path, _Counting("v1"), None), "same grading: nothing to do"
    assert cd.regrade(path, _Counting("v2"), None)


def test_models_are_checked_before_decoding(tmp_path):
    from tiny_models import saved_tiny_model

    folder = saved_tiny_model(tmp_path / "gen")
    config = dict(generator=folder, scorer_model=str(tmp_path / "no-such-scorer"))
    with pytest.raises(SystemExit, match=r"nothing was decoded:\n  - scorer_model .*no-such-scorer"):
        cd.check_models(config, ["decode", "score"])
    cd.check_models(config, ["decode"])  # the scorer is not needed to decode
    with pytest.raises(SystemExit, match="generator"):
        cd.check_models(dict(config, generator=str(tmp_path / "nope")), ["decode"])


def test_score_stage_scores_a_system_again_when_its_generations_changed(tmp_path, monkeypatch):
    """Same number of rows, other responses (the system was decoded again): the old scores are
    not kept; unchanged generations are not scored again; a score file without the hash is."""
    import pmi_decode.metrics.pmi_faith as pmi_faith
    import pmi_decode.metrics.reader as reader

    calls = []

    class FakeScorer:
        def __init__(self, *args, **kwargs):
            pass

        def score(self, docs, hists, resp):
            calls.append(list(resp))
            return [{"cpmi_sum": float(len(r)), "cpmi_mean": 1.0} for r in resp]

    monkeypatch.setattr(pmi_faith, "PMIFaith", FakeScorer)
    monkeypatch.setattr(reader, "reader_measures", lambda d, h, r: [{} for _ in r])
    monkeypatch.setattr(cd, "_checkers", lambda config: (_Counting("v1"), None))
    config = {"output_dir": str(tmp_path), "systems": {"s": {"alpha": 0.5}}, "scorer_model": "scorer"}
    inputs = [{"id": str(i), "document": "d", "history": ["h"], "response": "g"} for i in range(2)]
    gen = cd._paths(config, "s")["generations"]
    gen.parent.mkdir(parents=True)

    def decoded(responses):
        gen.write_text("".join(json.dumps({"id": str(i), "document": "d", "history": ["h"], "response": "g",
                                           "pmi_response": r, "settings": {"alpha": 0.5}}) + "\n"
                               for i, r in enumerate(responses)))

    decoded(["one", "two"])
    cd.score(config, inputs)
    assert calls == [["one", "two"]]
    cd.score(config, inputs)
    assert len(calls) == 1, "unchanged generations are not scored again"
    decoded(["three", "four"])
    cd.score(config, inputs)
    assert calls[-1] == ["three", "four"]
    scores = json.loads(cd._paths(config, "s")["scores"].read_text())
    assert [r["response"] for r in scores["scores"]] == ["three", "four"]
    cd.score(dict(config, scorer_model="other"), inputs)
    assert len(calls) == 3, "another scorer model scores again"
    path = cd._paths(config, "s")["scores"]
    data = json.loads(path.read_text())
    del data["scored_from"]  # a file written before the hash existed
    path.write_text(json.dumps(data))
    cd.score(dict(config, scorer_model="other"), inputs)
    assert len(calls) == 4


def test_a_settings_refusal_names_the_flag_this_script_has(tmp_path):
    """eval/compare_decoding.py has --output-dir, not --output."""
    from pmi_decode.batch.decode import DialogueFileError

    config = dict(CONFIG, generator="some-model", output_dir=str(tmp_path), systems={"s": {"alpha": 0.5}})
    path = cd._paths(config, "s")["generations"]
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"id": "0", "document": "d", "history": ["h"], "pmi_response": "r",
                                "settings": {"alpha": 0.25}}) + "\n")
    with pytest.raises(DialogueFileError, match="other settings") as err:
        cd.decode(config, [{"id": "0", "document": "d", "history": ["h"]}])
    assert str(err.value).endswith("write to a new --output-dir")
