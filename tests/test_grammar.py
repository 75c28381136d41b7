"""Grammar-error rate: the arithmetic with a stand-in checker, and the Harper backend on real sentences."""

import sys

import pytest

from pmi_decode.metrics import grammar
from pmi_decode.metrics.grammar import (
    GrammarCheckerUnavailable,
    HarperChecker,
    LanguageToolChecker,
    QuireChecker,
    get_checker,
    grammar_error_rate,
    grammar_metric,
)


class KeywordChecker:
    """Stand-in: proposes one correction per occurrence of the word 'bad'."""

    def count_errors(self, texts):
        return [t.split().count("bad") for t in texts]


def test_rate_is_share_of_responses_with_at_least_one_correction():
    texts = ["fine text", "bad", "bad bad bad", "also fine", ""]
    # Two of five responses have corrections; three corrections in one response still count once.
    assert grammar_error_rate(texts, KeywordChecker()) == pytest.approx(2 / 5)
    assert grammar_error_rate(["fine"], KeywordChecker()) == 0.0
    assert grammar_error_rate(["bad", "bad x"], KeywordChecker()) == 1.0


def test_rate_rejects_bad_input():
    with pytest.raises(ValueError, match="at least one"):
        grammar_error_rate([], KeywordChecker())
    with pytest.raises(ValueError, match="single string"):
        grammar_error_rate("bad", KeywordChecker())
    with pytest.raises(ValueError, match=r"texts\[1\]"):
        grammar_error_rate(["ok", None], KeywordChecker())

    class Broken:
        def count_errors(self, texts):
            return [0]

    with pytest.raises(ValueError, match="returned 1 counts for 2 texts"):
        grammar_error_rate(["a", "b"], Broken())
    with pytest.raises(ValueError, match="unknown grammar backend"):
        get_checker("gector")


def test_metric_rows_for_the_scoring_registry():
    rows = grammar_metric(["d"] * 3, [["h"]] * 3, ["ok", "bad", "bad bad"], grammar_checker=KeywordChecker(),
                          scorer_model="ignored")
    assert rows == [
        {"grammar_errors": 0, "ungrammatical": 0},
        {"grammar_errors": 1, "ungrammatical": 1},
        {"grammar_errors": 2, "ungrammatical": 1},
    ]
    from pmi_decode.batch.scoring import get_metric

    assert get_metric("grammar") is grammar_metric


@pytest.fixture(scope="module")
def harper_checker():
    pytest.importorskip("harper", reason="harper-py is not installed")
    return HarperChecker()


ERRORS = [
    "He go to school every day.",
    "I has a apple.",
    "Their going to the store tomorrow.",
    "I think the the movie was great.",
]
CLEAN = [
    "The cat sat on the mat.",
    "Barack Obama was the 44th president of the United States.",
    "I like that album, it was recorded in 1959.",
]


def test_harper_flags_known_errors_and_passes_clean_sentences(harper_checker):
    counts = harper_checker.count_errors(ERRORS + CLEAN)
    assert all(c >= 1 for c in counts[: len(ERRORS)]), counts
    assert counts[len(ERRORS) :] == [0] * len(CLEAN)
    assert grammar_error_rate(ERRORS + CLEAN, harper_checker) == pytest.approx(len(ERRORS) / (len(ERRORS) + len(CLEAN)))
    fix = harper_checker.corrections("He go to school every day.")
    assert fix[0]["text"] == "go" and fix[0]["suggestions"]


def test_harper_ignore_kinds(harper_checker):
    pytest.importorskip("harper")
    text = "The EGYPTIAN MESOBIADO is old."
    assert harper_checker.count_errors([text])[0] >= 1
    assert HarperChecker(ignore_kinds=("Spelling",)).count_errors([text]) == [0]


def test_missing_backends_say_how_to_get_one(monkeypatch):
    monkeypatch.setitem(sys.modules, "harper", None)  # import harper -> ImportError
    monkeypatch.setitem(sys.modules, "language_tool_python", None)
    monkeypatch.setitem(sys.modules, "quire_grammar", None)
    with pytest.raises(GrammarCheckerUnavailable, match=r"pip install \"quire-grammar\[model\]==0.3.4\""):
        QuireChecker()
    with pytest.raises(GrammarCheckerUnavailable, match="pip install harper-py"):
        HarperChecker()
    with pytest.raises(GrammarCheckerUnavailable, match="server_url"):
        LanguageToolChecker()
    with pytest.raises(GrammarCheckerUnavailable, match="language-tool-python is not installed"):
        LanguageToolChecker(server_url="http://localhost:8081")
    with pytest.raises(GrammarCheckerUnavailable, match="no grammar checker is available.*pip install"):
        get_checker(None)
    grammar._CHECKERS.clear()


@pytest.fixture(scope="module")
def quire_checker():
    pytest.importorskip("quire_grammar", reason="quire-grammar is not installed")
    return QuireChecker()


def test_quire_flags_agreement_errors_and_passes_clean_sentences(quire_checker):
    errors = ["He have a new car.", "They was happy about the result.", "Its a nice day and and the sky is blue."]
    counts = quire_checker.count_errors(errors + CLEAN)
    assert all(c >= 1 for c in counts[: len(errors)]), counts
    assert counts[len(errors):] == [0] * len(CLEAN)
    fix = quire_checker.corrections("He have a new car.")
    assert fix[0]["text"] == "have" and "has" in fix[0]["suggestions"]
    assert quire_checker.count_errors(["", "   "]) == [0, 0]


def test_quire_tagger_only_drops_the_rules(quire_checker):
    tagger = get_checker("quire", tagger_only=True)
    # the tagger proposes edits on its own ...
    assert tagger.count_errors(["They was happy about the result."]) == [1]
    assert all(c["rule"].startswith("model:") for c in tagger.corrections("Its a nice day and and the sky."))
    # ... and a style flag (passive voice, no fix) never counts as a grammar error in either mode
    assert quire_checker.count_errors(["The movie was watched by me."]) == [0]


def test_the_default_backend_is_the_one_the_comparison_picked():
    assert grammar.DEFAULT_BACKEND in grammar.BACKENDS
    rows = grammar_metric(["d"], [["h"]], ["They was happy."])
    assert rows == [{"grammar_errors": 1, "ungrammatical": 1}]


def test_quire_leaves_spacing_to_the_tokeniser(quire_checker):
    tokenised = "Can you recommend any movies to watch ?"
    assert quire_checker.count_errors([tokenised]) == [0]
    assert get_checker("quire", disable=("style",)).count_errors([tokenised]) == [1]  # the rule exists and fires


def test_quire_knows_the_abbreviations_documents_use(quire_checker):
    """"Inc." does not end a sentence: quoting "Marvel Worldwide Inc. and Timely" is no error,
    while a sentence really opened in lower case still is, and quire alone flags both."""
    quoted = ["Marvel Worldwide Inc. and Timely Publications are here.", "Acme Corp. sells things.",
              "Larry Page founded Google Inc. in 1998."]
    assert quire_checker.count_errors(quoted) == [0, 0, 0]
    assert quire_checker.count_errors(["I like it. the end is near."]) == [1]
    raw = get_checker("quire", disable=("style", "space-before-punctuation", "missing-space-after-sentence"))
    raw_flags = [c for c in raw._check(quoted[0], disable=raw.disable) if c.suggestions]
    assert any(c.rule_id == "capitalization-after-period" for c in raw_flags), "quire's own rule fires there"
