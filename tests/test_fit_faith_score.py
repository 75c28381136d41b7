"""eval/studies/fit_faith_score.py end to end on a small synthetic pair of dev sets: fitting from
the per-row files (``--from-rows``) reproduces the fit from the token caches, and a per-row file
that does not match the data is refused by name."""

import csv
import importlib.util
import json
import re
from pathlib import Path

import numpy as np
import pytest

from pmi_decode.experiments.faith_rows import load_rows, row_key
from pmi_decode.metrics.semantic_support import SEMANTIC_FEATURES

ROOT = Path(__file__).resolve().parents[1]


def _load_study(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "eval" / "studies" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


fit_faith_score = _load_study("fit_faith_score")

PEOPLE = ["Ada Lovelace", "Alan Turing", "Grace Hopper", "Edsger Dijkstra", "Barbara Liskov", "Donald Knuth"]
THINGS = ["the engine", "the machine", "the compiler", "the algorithm", "the language", "the book"]


def _dialogue(rng, i, faithful):
    person, thing = PEOPLE[i % len(PEOPLE)], THINGS[(i // 2) % len(THINGS)]
    year = 1900 + (7 * i) % 90
    document = f"{person} described {thing} in {year}. It was printed in London by a small press."
    history = f"What do you know about {thing}? ({i})"
    if faithful:
        response = f"{person} described {thing} in {year}, and it was printed in London."
    elif i % 2:
        response = f"{person} described {thing} in {year + 3}, and it was printed in London."
    else:
        response = f"{PEOPLE[(i + 1) % len(PEOPLE)]} described {thing} in {year}, and it sold well in Paris."
    return document, history, response


def _write_data(root: Path, rng):
    begin, audit = root / "begin", root / "audit"
    begin.mkdir()
    index = 0
    for source in ("wow", "tc", "cmu"):
        with (begin / f"begin_dev_{source}.tsv").open("w", newline="") as handle:
            writer = csv.writer(handle, delimiter="\t")
            writer.writerow(["model_name", "data_source", "knowledge", "message", "response", "begin_label"])
            for _ in range(24):
                faithful = rng.random() < 0.4
                document, history, response = _dialogue(rng, index, faithful)
                writer.writerow([["t5", "gpt2"][index % 2], source, document, history, response,
                                 "Fully attributable" if faithful else "Not fully attributable"])
                index += 1
    for folder, name, column in (("DoHA", "doha_processed_wow.csv", "doha"), ("GPT2", "gpt2_processed_cmu.csv", "gpt2"),
                                 ("CTRL", "ctrl_processed_topicalchat.csv", "ctrl")):
        (audit / folder).mkdir(parents=True)
        with (audit / folder / name).open("w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(["knowledge", "history", column, "begin_label", "vrm_label"])
            for _ in range(24):
                faithful = rng.random() < 0.35
                document, history, response = _dialogue(rng, index, faithful)
                label = ("entailment" if rng.random() < 0.7 else "entailment,uncooperative") if faithful else "hallucination"
                writer.writerow([document, history, response, label, "disclosure"])
                index += 1
    return begin, audit


def _write_caches(cache_dir: Path, semantic: Path, dirs, rng):
    """Token caches (word tokens, EOS last; CPMI higher for faithful rows) and sentence-encoder values."""
    cache_dir.mkdir()
    with semantic.open("w") as sem:
        for dataset, data_dir in dirs.items():
            with (cache_dir / f"{dataset}-tiny.jsonl").open("w") as handle:
                for example in load_rows(dataset, data_dir):
                    tokens = [t if i == 0 else " " + t for i, t in enumerate(re.findall(r"\w+|[^\w\s]", example.response))]
                    tokens.append("<eos>")
                    shift = 1.0 if example.faithful else 0.0
                    cpmi = (rng.normal(0.5 + shift, 1.0, len(tokens))).round(4).tolist()
                    upmi = (np.array(cpmi) + rng.normal(0, 0.5, len(tokens))).round(4).tolist()
                    key = row_key(example)
                    handle.write(json.dumps({"key": key, "num_tokens": len(tokens), "tokens": tokens,
                                             "token_cpmi": cpmi, "token_upmi": upmi}) + "\n")
                    values = {f: float(rng.normal(0.5 + 0.2 * example.faithful, 0.2)) for f in SEMANTIC_FEATURES}
                    sem.write(json.dumps({"key": key, **values}) + "\n")


@pytest.fixture(scope="module")
def dev_sets(tmp_path_factory):
    root = tmp_path_factory.mktemp("faith")
    rng = np.random.default_rng(0)
    begin, audit = _write_data(root, rng)
    _write_caches(root / "cache", root / "semantic.jsonl", {"begin": begin, "audit": audit}, rng)
    common = ["--scorer-model", "tiny", "--begin-dir", str(begin), "--audit-dir", str(audit),
              "--semantic-cache", str(root / "semantic.jsonl")]
    from_cache = fit_faith_score.main(common + ["--cache-dir", str(root / "cache"), "--output-dir", str(root / "a")])
    return root, common, from_cache


def test_from_rows_reproduces_the_fit_from_the_token_caches(dev_sets):
    root, common, from_cache = dev_sets
    assert from_cache["datasets"]["begin"]["num_rows"] == 72 and from_cache["datasets"]["audit"]["num_rows"] == 72
    from_rows = fit_faith_score.main(common + ["--from-rows", str(root / "a"), "--cache-dir", str(root / "none"),
                                               "--output-dir", str(root / "b")])
    assert from_rows["datasets"]["begin"]["read_from"].endswith("rows_begin_tiny.jsonl")
    for name, by_set in from_cache["metrics"].items():
        for d, result in by_set.items():
            assert from_rows["metrics"][name][d]["auroc"] == pytest.approx(result["auroc"], abs=1e-6), (name, d)
            assert from_rows["metrics"][name][d]["spearman"] == pytest.approx(result["spearman"], abs=1e-5), (name, d)
    for name, candidate in from_cache["feature_set_selection"]["candidates"].items():
        again = from_rows["feature_set_selection"]["candidates"][name]
        assert (again["begin"], again["audit"]) == pytest.approx((candidate["begin"], candidate["audit"]), abs=1e-6)
    assert from_rows["feature_set_selection"]["chosen"] == from_cache["feature_set_selection"]["chosen"]
    for d in ("begin", "audit"):
        assert from_rows["faith_score_fits"][d]["coef"] == pytest.approx(from_cache["faith_score_fits"][d]["coef"],
                                                                          rel=1e-4, abs=1e-5)
    # the fact features were computed from the texts: a wrong year or name is counted on some row
    rows = [json.loads(line) for line in (root / "b" / "rows_audit_tiny.jsonl").open()]
    assert any(r["unsupported_numbers"] > 0 for r in rows) and any(r["unsupported_entities"] > 0 for r in rows)
    assert all(r["unsupported_numbers"] == 0 and r["unsupported_entities"] == 0 for r in rows if r["label_lenient"])
    # ... and so were the in-context counts (a wrong year is also a wrong fact in context), reported like the others
    assert any(r["wrong_facts_in_context"] > 0 and r["wrong_numbers_in_context"] > 0 for r in rows)
    assert all(r["wrong_facts_in_context"] == r["wrong_numbers_in_context"] + r["wrong_names_in_context"] for r in rows)
    for name in ("Wrong facts in context (negated)", "Wrong numbers in context (negated)"):
        assert from_rows["metrics"][name]["audit"]["auroc"] == pytest.approx(from_cache["metrics"][name]["audit"]["auroc"])


def test_every_declared_candidate_is_reported(dev_sets):
    _, _, report = dev_sets
    selection = report["feature_set_selection"]
    assert set(selection["candidates"]) == set(fit_faith_score.CANDIDATE_FEATURE_SETS)
    best = max(c["mean"] for c in selection["candidates"].values())
    assert selection["candidates"][selection["chosen"]]["mean"] >= best - fit_faith_score.TIE
    # every candidate's cross-fit AUROCs too, with the report's folds: the used set's equal its FaithScore (CV) row
    used = next(name for name, fs in fit_faith_score.CANDIDATE_FEATURE_SETS.items() if list(fs) == selection["used"])
    for d in ("begin", "audit"):
        assert all(0.0 <= c[f"cv_{d}"] <= 1.0 for c in selection["candidates"].values())
        assert selection["candidates"][used][f"cv_{d}"] == pytest.approx(report["metrics"]["FaithScore (CV)"][d]["auroc"])


def test_in_context_candidates_extend_the_shipped_sets():
    """The candidates with the wrong-fact counts are the two shipped sets plus those counts only."""
    sets = fit_faith_score.CANDIDATE_FEATURE_SETS
    for base in ("support_facts", "full9_facts"):
        assert sets[f"{base}_wrong"] == (*sets[base], "wrong_facts_in_context")
        assert sets[f"{base}_wrong_split"] == (*sets[base], "wrong_numbers_in_context", "wrong_names_in_context")


def test_a_rows_file_that_does_not_match_the_data_is_refused(dev_sets, tmp_path):
    root, common, _ = dev_sets
    lines = (root / "a" / "rows_begin_tiny.jsonl").read_text().splitlines()
    first = json.loads(lines[0])
    (tmp_path / "rows_begin_tiny.jsonl").write_text("\n".join([json.dumps({**first, "key": "0" * 20})] + lines[1:]))
    (tmp_path / "rows_audit_tiny.jsonl").write_text((root / "a" / "rows_audit_tiny.jsonl").read_text())
    with pytest.raises(SystemExit, match="key 0{20} is not a row of the begin data"):
        fit_faith_score.main(common + ["--from-rows", str(tmp_path), "--output-dir", str(tmp_path / "out")])
    flipped = {**first, "label": 1 - first["label"]}
    (tmp_path / "rows_begin_tiny.jsonl").write_text("\n".join([json.dumps(flipped)] + lines[1:]))
    with pytest.raises(SystemExit, match="but the data says"):
        fit_faith_score.main(common + ["--from-rows", str(tmp_path), "--output-dir", str(tmp_path / "out")])


def test_coefficients_need_both_dev_sets(dev_sets, tmp_path):
    root, common, _ = dev_sets
    (tmp_path / "rows_begin_tiny.jsonl").write_text((root / "a" / "rows_begin_tiny.jsonl").read_text())
    with pytest.raises(SystemExit, match="--write-coefficients needs both dev sets"):
        fit_faith_score.main(common + ["--from-rows", str(tmp_path), "--cache-dir", str(tmp_path / "none"),
                                       "--output-dir", str(tmp_path / "out"), "--write-coefficients"])


def test_fact_swap_changes_exactly_one_supported_fact():
    """eval/studies/fact_swap_check.py's perturbation: one year, count or name replaced by one the
    sources do not hold, written the same way; the rest of the response is untouched."""
    fact_swap_check = _load_study("fact_swap_check")

    from pmi_decode.metrics.fact_support import fact_features, fact_units, source_forms
    from pmi_decode.metrics.token_aggregation import load_nlp, load_nlp_ner

    nlp, ner = load_nlp(), load_nlp_ner()
    document = "Miles Davis recorded Kind of Blue in 1959 for Columbia Records. It sold 1,000 copies."
    forms = source_forms(document, [], nlp)
    rng = np.random.default_rng(0)
    seen = set()
    for response in ("Yes, Miles Davis recorded it in 1959 for Columbia.", "It sold 1,000 copies."):
        for _ in range(12):
            swap = fact_swap_check.swap_one_fact(response, forms, fact_units(response, ner),
                                                 {"PERSON": ["John Coltrane", "Miles Davis"], "ORG": ["Motown"]}, rng)
            changed = swap["changed"]
            seen.add(swap["unit"])
            out = fact_features(document, [], changed, nlp=nlp, nlp_ner=ner)
            assert out["unsupported_numbers"] + out["unsupported_entities"] == 1.0, changed
            assert changed.replace(swap["replacement"], swap["unit"], 1) == response
            if swap["unit"] == "1959":
                assert 1950 <= int(swap["replacement"]) <= 1968
            if swap["unit"] == "1,000":
                assert "," in swap["replacement"] or int(swap["replacement"]) < 1000
    assert seen == {"Miles Davis", "1959", "Columbia", "1,000"}
    assert fact_swap_check.swap_one_fact("I love it.", forms, fact_units("I love it.", ner), {}, rng) is None


def test_one_dev_set_alone_gives_the_one_set_report(dev_sets, tmp_path):
    """A scorer with only one dev set scored (a partial cache): that set's report, no transfer."""
    root, common, _ = dev_sets
    (tmp_path / "rows_begin_tiny.jsonl").write_text((root / "a" / "rows_begin_tiny.jsonl").read_text())
    report = fit_faith_score.main(common + ["--from-rows", str(tmp_path), "--cache-dir", str(tmp_path / "none"),
                                            "--output-dir", str(tmp_path / "out")])
    assert report["dataset"] == "begin" and report["num_rows"] == 72
    assert "Fact support share" in report["metrics"] and "FaithScore" in report["metrics"]
    assert (tmp_path / "out" / "faith_results_tiny_begin_only.md").is_file()
