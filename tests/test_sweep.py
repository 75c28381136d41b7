"""Alpha/p sweeps on tiny random models: resume after interruption, best cell, table and plots."""

import json

import pytest
import torch
from tiny_models import DIALOGUES, tiny_model, tiny_tokenizer

from pmi_decode.metrics.pmi_faith import PMIFaith
from pmi_decode.experiments.sweep import (
    Cell,
    MemoPMIScorer,
    SweepConfig,
    best_cell,
    cell_paths,
    generate_cells,
    grid,
    load_sweep_config,
    pareto_front,
    run_sweep,
    score_cells,
    select_records,
)

GOLDS = ["It was built in 1889.", "Kind of Blue is from 1959.", "They formed in Liverpool."]
RECORDS = [{"id": f"r{i}", "document": d, "history": h, "response": g} for i, ((d, h), g) in enumerate(zip(DIALOGUES, GOLDS))]


class KeywordChecker:
    """Stand-in grammar checker (Harper is tested in test_grammar.py): one error per 'the'."""

    def count_errors(self, texts):
        return [t.lower().split().count("the") for t in texts]


@pytest.fixture(scope="module")
def models():
    generator = (tiny_model("llama", seed=0), tiny_tokenizer("llama"))
    scorer = PMIFaith(tiny_model("llama", seed=1), tiny_tokenizer("llama"))
    return generator, scorer


def make_config(out, **kw):
    base = dict(dataset="tiny", split="dev", output_dir=str(out), methods=["beam_search", "beam_sampling"],
                alphas=[0, 1], ps=[0.5, 1], num_beams=2, max_new_tokens=5, batch_size=2, seed=3,
                scorer_model="tiny-scorer")
    base.update(kw)
    return SweepConfig(**base)


def run(config, models, **kw):
    generator, scorer = models
    return run_sweep(config, generator=generator, pmi_scorer=MemoPMIScorer(scorer), grammar_checker=KeywordChecker(),
                     records=RECORDS, progress=False, **kw)


class Interrupt(Exception):
    pass


def test_interrupted_sweep_resumes_to_the_same_table(tmp_path, models):
    full = run(make_config(tmp_path / "full"), models)
    config = make_config(tmp_path / "resumed")
    generator, scorer = models

    def stop_after_three(cell):
        if len(done) == 2:
            raise Interrupt
        done.append(cell)

    done = []
    with pytest.raises(Interrupt):
        generate_cells(config, RECORDS, *generator, progress=False, on_cell_done=stop_after_three)
    written = sorted(p.name for p in (tmp_path / "resumed" / "generations").rglob("*") if p.is_file())
    assert len(written) == 3 and not [n for n in written if n.endswith(".tmp")]
    first = cell_paths(config.output_dir, config.cells[0])["generations"]
    stamp = first.stat().st_mtime_ns

    class FailingScorer:
        """Dies on the third cell, like a scorer killed mid-sweep."""

        calls = 0

        def score(self, *args, **kwargs):
            FailingScorer.calls += 1
            if FailingScorer.calls == 3:
                raise Interrupt
            return scorer.score(*args, **kwargs)

    with pytest.raises(Interrupt):
        score_cells(config, pmi_scorer=FailingScorer(), grammar_checker=KeywordChecker(), progress=False)
    assert len(list((tmp_path / "resumed" / "scores").rglob("*.json"))) == 2

    resumed = run(config, models)
    assert first.stat().st_mtime_ns == stamp  # finished cells are not decoded again
    assert resumed["table"] == full["table"]
    # Cells scored before the interruption went through the scorer on their own (padded batches),
    # the rest in one call that shares prompts: the same scores up to float rounding.
    assert len(resumed["cells"]) == len(full["cells"])
    for got, want in zip(resumed["cells"], full["cells"]):
        assert got.keys() == want.keys()
        for key, value in want.items():
            assert got[key] == (pytest.approx(value, rel=1e-12, abs=1e-12) if isinstance(value, float) else value), key
    # Sampling cells really sampled something different from the beam-search ones somewhere.
    gen = lambda method, a, p: [json.loads(l)["pmi_response"] for l in open(  # noqa: E731
        cell_paths(config.output_dir, Cell(method, a, p))["generations"])]
    assert any(gen("beam_search", a, p) != gen("beam_sampling", a, p) for a in (0.0, 1.0) for p in (0.5, 1.0))


def test_table_and_plot_files(tmp_path, models):
    result = run(make_config(tmp_path, best_max_grammar_error_rate=1.0), models)
    table = (tmp_path / "table5.md").read_text()
    assert table == result["table"]
    assert "## beam search" in table and "## beam sampling" in table
    assert "| alpha \\ p | 0.5 | 1 |" in table
    assert "min-max normalised" in table and "Best cell" in table
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert len(summary["cells"]) == 8
    assert "## Change against alpha = 0, turn by turn" in table
    assert len(summary["paired_differences"]) == 4  # alpha 1 against alpha 0, per method and p
    assert set(summary["best"]) == {"beam_search", "beam_sampling", "beam_search_grammar_limited",
                                    "beam_sampling_grammar_limited"}
    assert summary["best"]["beam_search"] == summary["best"]["beam_search_grammar_limited"]  # limit 100%
    pngs = sorted(p.name for p in (tmp_path / "plots").glob("*.png"))
    assert pngs == sorted(f"{m}_{k}.png" for m in ("beam_search", "beam_sampling") for k in
                          ("heatmap_pmi_faith_norm", "heatmap_rouge_l", "heatmap_grammar_error_rate", "frontier"))
    for name in pngs:
        assert (tmp_path / "plots" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for cell in summary["cells"]:
        assert 0.0 <= cell["pmi_faith_norm"] <= 1.0 and 0.0 <= cell["grammar_error_rate"] <= 1.0


def test_best_cell_and_front():
    rows = [
        {"method": "m", "alpha": 0.0, "p": 0.6, "rouge_l": 0.40, "pmi_faith_norm": 0.52},
        {"method": "m", "alpha": 0.25, "p": 0.6, "rouge_l": 0.40, "pmi_faith_norm": 0.58},
        {"method": "m", "alpha": 1.0, "p": 1.0, "rouge_l": 0.02, "pmi_faith_norm": 0.95},
        {"method": "m", "alpha": 0.5, "p": 0.9, "rouge_l": 0.45, "pmi_faith_norm": 0.30},
        {"method": "other", "alpha": 0.5, "p": 0.6, "rouge_l": 0.9, "pmi_faith_norm": 0.9},
    ]
    assert (best_cell(rows, method="m")["alpha"], best_cell(rows, method="m")["p"]) == (0.25, 0.6)
    assert best_cell(rows)["method"] == "other"
    tie = [dict(rows[0], pmi_faith_norm=0.58), rows[1]]
    assert best_cell(tie)["alpha"] == 0.0  # ties go to the plainer decoder
    front = pareto_front(rows[:4])
    assert [(r["alpha"], r["p"]) for r in front] == [(1.0, 1.0), (0.25, 0.6), (0.5, 0.9)]
    with pytest.raises(ValueError, match="ROUGE-L"):
        best_cell([{"method": "m", "alpha": 0, "p": 1, "rouge_l": None, "pmi_faith_norm": 0.5}])
    # A garbage cell wins the plain sum when ROUGE-L barely moves; the grammar limit excludes it.
    flat = [
        {"method": "m", "alpha": 0.0, "p": 0.6, "rouge_l": 0.12, "pmi_faith_norm": 0.10, "grammar_error_rate": 0.25},
        {"method": "m", "alpha": 0.25, "p": 0.6, "rouge_l": 0.12, "pmi_faith_norm": 0.18, "grammar_error_rate": 0.33},
        {"method": "m", "alpha": 1.0, "p": 1.0, "rouge_l": 0.01, "pmi_faith_norm": 0.33, "grammar_error_rate": 0.83},
    ]
    assert best_cell(flat)["alpha"] == 1.0
    assert best_cell(flat, max_grammar_error_rate=0.5)["alpha"] == 0.25
    with pytest.raises(ValueError, match="grammar-error rate <= 0.1"):
        best_cell(flat, max_grammar_error_rate=0.1)


def test_grid_selection_and_config_errors(tmp_path):
    cells = grid(["beam_search"], [0, 1], [0.6, 1])
    assert [c.name for c in cells] == ["alpha0_p0.6", "alpha0_p1", "alpha1_p0.6", "alpha1_p1"]
    assert select_records(list(range(10)), 4) == [0, 2, 5, 7]
    assert select_records(list(range(3)), 10) == [0, 1, 2]
    with pytest.raises(ValueError, match="alpha must be a number in \\[0, 1\\]"):
        make_config(tmp_path, alphas=[0, 2])
    with pytest.raises(ValueError, match="methods"):
        make_config(tmp_path, methods=["nucleus"])
    path = tmp_path / "sweep.yaml"
    path.write_text("dataset: topicalchat\nsplit: valid_rare\nalphas: [0, 0.5]\nbogus: 1\n")
    with pytest.raises(ValueError, match=r"sweep.yaml: unknown setting\(s\) \['bogus'\]"):
        load_sweep_config(path)
    path.write_text("dataset: topicalchat\nsplit: valid_rare\nps: [0.6, 1.5]\n")
    with pytest.raises(ValueError, match="sweep.yaml: p must be a number in \\(0, 1\\]"):
        load_sweep_config(path)
    path.write_text("dataset: topicalchat\nsplit: valid_rare\nalphas: 0.5\n")
    with pytest.raises(ValueError, match=r"sweep.yaml: alphas must be a list, e.g. \[0.5\]"):
        load_sweep_config(path)
    path.write_text("dataset: topicalchat\nsplit: [unclosed\n")
    with pytest.raises(ValueError, match="sweep.yaml: line"):
        load_sweep_config(path)
    path.write_text("dataset: topicalchat\nsplit: valid_rare\n")
    config = load_sweep_config(path, num_turns=5)
    assert config.num_turns == 5 and len(config.cells) == 32


def test_shipped_configs_load():
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "configs"
    for name in ("sweep_topicalchat.yaml", "sweep_faithdial.yaml"):
        config = load_sweep_config(root / name)
        assert config.alphas == [0.0, 0.25, 0.5, 1.0] and config.ps == [0.6, 0.75, 0.9, 1.0]


def test_all_cells_are_scored_in_one_scorer_call(tmp_path, models):
    """The scorer sees every cell's responses at once, so it can run each dialogue's prompt once
    for all cells; the cell scores equal scoring each cell on its own."""
    generator, scorer = models
    config = make_config(tmp_path / "s")
    generate_cells(config, RECORDS, *generator, progress=False)

    class Counting:
        calls = 0

        def score(self, *args, **kwargs):
            Counting.calls += 1
            return scorer.score(*args, **kwargs)

    score_cells(config, pmi_scorer=MemoPMIScorer(Counting()), grammar_checker=KeywordChecker(), progress=False)
    assert Counting.calls == 1
    together = [json.loads(cell_paths(config.output_dir, c)["scores"].read_text())["scores"] for c in config.cells]
    for cell, scores in zip(config.cells, together):
        rows = [json.loads(line) for line in cell_paths(config.output_dir, cell)["generations"].read_text().splitlines()]
        kept = [(g, r) for g, r in zip(scores, rows) if r["pmi_response"].strip()]
        alone = scorer.score([r["document"] for _, r in kept], [r["history"] for _, r in kept],
                             [r["pmi_response"] for _, r in kept])
        assert [g["cpmi_sum"] for g, _ in kept] == pytest.approx([a["cpmi_sum"] for a in alone], abs=1e-9)
        assert all(g["num_tokens"] == 0 for g, r in zip(scores, rows) if not r["pmi_response"].strip())


def test_scorer_sees_the_generators_history_window(tmp_path):
    """The sweep's PMI-Faith scorer is built with the generator's max_history_turns, so a response
    is scored against the turns it was decoded from, not against older turns that would push the
    document out of the scorer's max_length."""
    from pmi_decode.experiments.sweep import make_pmi_scorer

    folder = tmp_path / "scorer"
    tiny_model("llama", dtype=torch.float32).save_pretrained(folder)
    tiny_tokenizer("llama").save_pretrained(folder)
    config = make_config(tmp_path / "s", scorer_model=str(folder), max_history_turns=2)
    memo = make_pmi_scorer(config)
    assert memo.scorer.max_history_turns == 2
    assert config.scoring_settings()["max_history_turns"] == 2
    doc, hist = DIALOGUES[0]
    got = memo.score([doc], [hist], ["It is in Paris."])[0]
    want = PMIFaith(memo.scorer.model, memo.scorer.tokenizer).score([doc], [hist[-2:]], ["It is in Paris."])[0]
    assert got["cpmi_sum"] == pytest.approx(want["cpmi_sum"], abs=1e-9)


def test_paired_differences_against_alpha_zero():
    """Hand-made cells: the change is computed turn by turn (matched by id, whatever the order)
    against the alpha = 0 cell of the same method and p, with a 1.96-standard-error interval."""
    import statistics

    from pmi_decode.experiments.report import ResponseSet
    from pmi_decode.experiments.sweep import paired_differences, paired_differences_markdown

    def cell(alpha, p, pmi, rouge, bad, method="beam_search"):
        ids = ["a", "b", "c"]
        rs = ResponseSet(method=method, objective="x", ids=ids, documents=["d"] * 3, histories=[["h"]] * 3,
                         responses=["r"] * 3, meta={"alpha": alpha, "p": p, "method_key": method})
        rs.scores = [{"id": i, "cpmi_sum": x, "rouge_l": y, "ungrammatical": z} for i, x, y, z in zip(ids, pmi, rouge, bad)]
        return rs

    base = cell(0.0, 0.9, [1.0, 2.0, 3.0], [0.2, 0.2, 0.2], [0, 0, 1])
    up = cell(0.5, 0.9, [2.0, 2.0, 7.0], [0.1, 0.3, 0.2], [1, 0, 1])
    up.scores.reverse()  # pairing is by id, not by position
    other_p = cell(0.0, 0.6, [9.0, 9.0, 9.0], [0.0, 0.0, 0.0], [1, 1, 1])
    rows = paired_differences([base, up, other_p])
    assert len(rows) == 1
    row = rows[0]
    assert (row["method"], row["alpha"], row["p"], row["baseline_alpha"], row["n"]) == ("beam_search", 0.5, 0.9, 0.0, 3)
    diffs = [1.0, 0.0, 4.0]
    assert row["pmi_faith_diff"] == pytest.approx(statistics.mean(diffs))
    assert row["pmi_faith_ci95"] == pytest.approx(1.96 * statistics.stdev(diffs) / 3 ** 0.5)
    assert row["rouge_l_diff"] == pytest.approx(0.0) and row["rouge_l_ci95"] == pytest.approx(1.96 * 0.1 / 3 ** 0.5)
    assert row["grammar_error_rate_diff"] == pytest.approx(1 / 3)
    table = paired_differences_markdown(rows, "cpmi_sum")
    assert "| beam search | 0.5 | 0.9 | 3 | +1.67 ± " in table and "+33 ± " in table


def test_decode_options_reach_every_cell_and_its_settings(tmp_path, models):
    """A sweep with the end rule and the guards decodes every cell with them (the records'
    settings say so), records them in the cell settings, and refuses unknown or mistyped ones."""
    generator, _ = models
    options = {"conditional_end": True, "response_no_repeat_ngram_size": 3, "block_layout_markers": True,
               "prefer_finished": True}
    config = make_config(tmp_path / "opts", methods=["beam_search"], alphas=[0.5], ps=[0.9], decode_options=options)
    generate_cells(config, RECORDS, *generator, progress=False)
    rows = [json.loads(line) for line in open(cell_paths(config.output_dir, config.cells[0])["generations"])]
    assert all(r["settings"]["conditional_end"] is True and r["settings"]["response_no_repeat_ngram_size"] == "3+numbers_exempt"
               and r["settings"]["prefer_finished"] is True for r in rows)
    assert config.generation_settings("beam_search")["decode_options"] == options
    assert "decode_options" not in make_config(tmp_path / "none").generation_settings("beam_search")
    for bad in ({"conditional_end": "yes"}, {"temperature": 0.7}, {"response_no_repeat_ngram_size": True}, [1]):
        with pytest.raises(ValueError, match="decode_options"):
            make_config(tmp_path / "bad", decode_options=bad)


LIBRARY_PAGE = ("The Harlow Street Library is open Monday to Friday from 9 am to 8 pm, and on Saturdays from "
                "10 am to 4 pm. Members can borrow up to 12 books for 3 weeks.")


def _library_cell_summaries(cells: dict, pmi: dict, questions, answers) -> list[dict]:
    """The sweep's summaries of cells ``{(alpha, p): responses}`` over the library page, each cell
    with the PMI-Faith sum ``pmi[(alpha, p)]`` and ROUGE-L 0.5, scored for correctness."""
    from pmi_decode.experiments.report import ResponseSet, add_correctness_measures, summarise

    sets = []
    for (alpha, p), responses in cells.items():
        ids = [str(i) for i in range(len(responses))]
        rs = ResponseSet(method="beam search", objective="x", ids=ids, documents=[LIBRARY_PAGE] * len(ids),
                         histories=questions, responses=responses, golds=responses, meta={"alpha": alpha, "p": p},
                         answers=answers, answerable=[True] * len(ids))
        rs.scores = [{"id": i, "cpmi_sum": pmi[(alpha, p)], "rouge_l": 0.5} for i in rs.ids]
        sets.append(add_correctness_measures(rs))
    return summarise(sets)[0]


def test_best_cell_refuses_a_cell_that_puts_wrong_facts_beside_its_answers():
    """Same answer match and wrong-fact rate as the plainest cell, but its answers come with a
    wrong fact beside them: fewer answers with the facts intact, so not chosen."""
    questions = [["When does it close on weekdays?"], ["How many books can I borrow?"]]
    answers = [["8 pm"], ["12 books", "12"]]
    cells = {
        (0.0, 1.0): ["It closes at 8 pm on weekdays.", "Members can borrow up to 3 books."],
        (0.5, 0.9): ["On weekdays it is open until 8 pm. On weekdays it is open until 4 pm.", "Members can borrow books."],
    }
    summaries = _library_cell_summaries(cells, {(0.0, 1.0): 1.0, (0.5, 0.9): 9.0}, questions, answers)
    plain, other = sorted(summaries, key=lambda s: s["alpha"])
    assert plain["answer_match"] == other["answer_match"] == 0.5
    assert plain["wrong_fact_rate"] == other["wrong_fact_rate"] == 0.5
    assert (plain["answers_intact"], other["answers_intact"]) == (0.5, 0.0)
    assert best_cell(summaries, require_correct=False)["alpha"] == 0.5
    assert best_cell(summaries)["alpha"] == 0.0


def test_best_cell_prefers_the_correct_cell_to_a_garbled_copy():
    """A cell that recites the document with its facts garbled earns more PMI-Faith and knowledge
    overlap; the sweep must still pick the cell whose answers are right."""
    questions = [["When does it close on weekdays?"], ["How many books can I borrow?"]]
    answers = [["8 pm"], ["12 books", "12"]]
    cells = {
        (0.0, 1.0): ["It closes at 8 pm on weekdays.", "You can borrow up to 12 books."],
        (0.25, 0.9): ["On weekdays it is open until 8 pm.", "Members can borrow 12 books at a time."],
        (0.5, 0.9): ["The library is open Monday to Friday from 9 am to 4 pm, and on Saturdays from 10 am.",
                     "Members can borrow up to 3 books for 12 weeks."],
    }
    pmi = {(0.0, 1.0): 1.0, (0.25, 0.9): 2.0, (0.5, 0.9): 9.0}  # the garbled copy scores highest
    summaries = _library_cell_summaries(cells, pmi, questions, answers)
    garbled = next(s for s in summaries if s["alpha"] == 0.5)
    assert garbled["wrong_fact_rate"] == 1.0 and garbled["pmi_faith_norm"] == 1.0
    assert best_cell(summaries, require_correct=False)["alpha"] == 0.5   # the paper's rule picks the garbled copy
    best = best_cell(summaries)
    assert (best["alpha"], best["p"]) == (0.25, 0.9)
    assert best["answer_match"] == 1.0 and best["wrong_fact_rate"] == 0.0


# ---------------------------------------------------------------------------- one's own dialogues
@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory):
    from tiny_models import saved_tiny_model

    root = tmp_path_factory.mktemp("sweep-models")
    return saved_tiny_model(root / "generator"), saved_tiny_model(root / "scorer", "gpt2")


def _jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return str(path)


def test_a_sweep_over_ones_own_jsonl_from_the_command_line(tmp_path, model_dirs, capsys):
    from pmi_decode.cli import main

    generator, scorer = model_dirs
    inp = _jsonl(tmp_path / "mine.jsonl", RECORDS)
    out = tmp_path / "sweep"
    assert main(["sweep", "--input", inp, "--generator", generator, "--scorer-model", scorer, "--output-dir", str(out),
                 "--methods", "greedy", "--alphas", "0,1", "--ps", "1", "--grammar-backend", "harper",
                 "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert f"# Alpha/p sweep: {inp}, 3 turns" in printed
    rows = [json.loads(line) for line in (out / "generations" / "greedy" / "alpha1_p1.jsonl").read_text().splitlines()]
    assert [r["id"] for r in rows] == ["r0", "r1", "r2"] and rows[0]["sweep_settings"]["input"] == inp
    scores = json.loads((out / "scores" / "greedy" / "alpha1_p1.json").read_text())
    assert scores["scoring_settings"]["scorer_model"] == scorer
    assert [row["id"] for row in scores["scores"]] == ["r0", "r1", "r2"]
    assert all(isinstance(row["cpmi_sum"], float) for row in scores["scores"])
    # the same settings through a shipped config: --input replaces its data set
    config = load_sweep_config(Path_of("configs/sweep_topicalchat.yaml"), input=inp)
    assert config.input == inp and config.dataset is None and config.data_dir is None and config.split is None


def Path_of(relative):
    from pathlib import Path

    return Path(__file__).resolve().parents[1] / relative


def test_sweep_input_errors_are_clear(tmp_path):
    with pytest.raises(ValueError, match="give the dialogues to decode"):
        SweepConfig()
    with pytest.raises(ValueError, match="not both"):
        SweepConfig(dataset="topicalchat", split="x", input="a.jsonl")
    with pytest.raises(ValueError, match="'split' is required"):
        SweepConfig(dataset="topicalchat")
    bad = _jsonl(tmp_path / "bad.jsonl", [dict(RECORDS[0], document="")])
    from pmi_decode.batch.decode import DialogueFileError
    from pmi_decode.experiments.sweep import load_split

    with pytest.raises(DialogueFileError, match="bad.jsonl:1: 'document' is empty"):
        load_split(SweepConfig(input=bad))


@pytest.mark.parametrize("scorer", ["missing-folder", "offline-hub-id", "uninstalled-embedded"])
def test_a_scorer_that_cannot_load_stops_the_sweep_before_decoding(tmp_path, model_dirs, monkeypatch, scorer):
    """The shipped configs score with embedded-gemma; without its package the run used to fail only
    after the whole decoding stage. Now nothing is decoded and the message names the model and the fix."""
    import dataclasses

    from pmi_decode import models
    from pmi_decode.models import ModelNotAvailableError

    name = {"missing-folder": str(tmp_path / "no-such-model"), "offline-hub-id": "some-org/not-cached",
            "uninstalled-embedded": "embedded-gemma"}[scorer]
    if scorer == "uninstalled-embedded":  # the package it looks for is one no environment has
        spec = dataclasses.replace(models.EMBEDDED_MODELS["embedded-gemma"], package="pmi-decode-absent-package")
        monkeypatch.setitem(models.EMBEDDED_MODELS, "embedded-gemma", spec)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    generator, _ = model_dirs
    config = SweepConfig(input=_jsonl(tmp_path / "in.jsonl", RECORDS), generator=generator, scorer_model=name,
                         output_dir=str(tmp_path / "out"), methods=["greedy"], alphas=[1], ps=[1],
                         grammar_backend="harper")
    with pytest.raises(ModelNotAvailableError, match=r"nothing was decoded:\n  - scorer_model") as caught:
        run_sweep(config, progress=False)
    assert repr(name) in str(caught.value)
    if scorer == "uninstalled-embedded":
        assert "pip install" in str(caught.value)
    assert not (tmp_path / "out").exists()
    # with the generation stage alone the scorer is not needed, and the cells are decoded
    run_sweep(config, stages=["generate"], progress=False)
    assert (tmp_path / "out" / "generations" / "greedy" / "alpha1_p1.jsonl").is_file()


def test_the_answers_reach_every_cells_generations(tmp_path, models):
    """The correctness checks of the best cell compare each response with the record's reference
    answers (or its mark as unanswerable): a cell's generations must carry them, from a record's
    own fields or its loader's meta (they were dropped, so every check passed for want of data)."""
    from types import SimpleNamespace

    records = [dict(RECORDS[0], answers=["1889"]), dict(RECORDS[1], answerable=False),
               SimpleNamespace(id="r2", document=RECORDS[2]["document"], history=RECORDS[2]["history"],
                               response=GOLDS[2], meta={"answers": ["Liverpool"], "answerable": True})]
    config = make_config(tmp_path / "s", methods=["beam_search"], alphas=[1], ps=[1])
    generate_cells(config, records, *models[0], progress=False)
    rows = [json.loads(line) for line in
            cell_paths(config.output_dir, config.cells[0])["generations"].read_text().splitlines()]
    by_id = {r["id"]: r for r in rows}
    assert by_id["r0"]["answers"] == ["1889"] and by_id["r1"]["answerable"] is False
    assert by_id["r2"]["answers"] == ["Liverpool"] and by_id["r2"]["answerable"] is True


def test_a_cell_is_redone_when_batch_size_or_the_input_file_changed(tmp_path, models, caplog):
    """batch_size and the input's content are part of a cell's settings: a finished cell decoded
    with another batch size, or from an input file edited since (same path), is decoded again,
    and the warning names what changed; a cell file written before these keys existed is redone."""
    import logging

    from pmi_decode.experiments.sweep import _generation_done

    generator, _ = models
    inp = tmp_path / "in.jsonl"
    _jsonl(inp, RECORDS)
    config = SweepConfig(input=str(inp), output_dir=str(tmp_path / "out"), methods=["beam_search"], alphas=[0.5],
                         ps=[0.9], num_beams=2, max_new_tokens=5, batch_size=2, scorer_model="tiny-scorer")
    assert generate_cells(config, RECORDS, *generator, progress=False) == config.cells
    path = cell_paths(config.output_dir, config.cells[0])["generations"]
    settings = config.generation_settings("beam_search")
    assert settings["batch_size"] == 2 and len(settings["input_sha256"]) == 64
    assert generate_cells(config, RECORDS, *generator, progress=False) == [], "nothing changed: kept"
    with caplog.at_level(logging.WARNING, logger="pmi_decode.experiments.sweep"):
        assert not _generation_done(path, SweepConfig(**{**vars(config), "batch_size": 3}).generation_settings(
            "beam_search"))
    assert "batch_size: 2 in the file, 3 now" in caplog.text
    _jsonl(inp, [dict(RECORDS[0], document="another document")] + RECORDS[1:])  # edited in place
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="pmi_decode.experiments.sweep"):
        assert generate_cells(config, RECORDS, *generator, progress=False) == config.cells
    assert "input_sha256" in caplog.text
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    for key in ("batch_size", "input_sha256"):  # a cell file from before these keys: redone
        old = dict(config.generation_settings("beam_search"))
        del old[key]
        path.write_text("".join(json.dumps(dict(r, sweep_settings=old)) + "\n" for r in rows))
        assert not _generation_done(path, config.generation_settings("beam_search"), say=False)
