"""Grammar-error rate: the share of responses a grammar checker would correct.

The PMI-Decode paper (Nandwani et al., 2023) counts a response as ungrammatical when GECToR
proposes at least one edit to it and reports the share of such responses. This module keeps that
meaning with checkers that run here: a response is ungrammatical when the checker proposes at
least one correction (a flagged span with at least one suggested fix).

Backends, behind the small :class:`GrammarChecker` protocol:

* :class:`QuireChecker` (default): quire-grammar's GECToR-style edit tagger (distilbert, int8
  ONNX) with its narrow rules, offline (``pip install "quire-grammar[model]==0.3.4"``). Chosen
  over Harper by the comparison in ``docs/metrics.md``: no false flags on hand-made grammatical
  sentences, and it flags 10% of Topical-Chat human responses, mostly real slips (Harper: 56%,
  mostly spelling of names, spacing and capitalisation).
* :class:`HarperChecker`: Harper, an offline rule-based English checker (``pip install
  harper-py``); no Java, no server, a few milliseconds per response; catches more real errors
  but flags most casual human text.
* :class:`LanguageToolChecker`: LanguageTool through ``language-tool-python``
  (``pip install language-tool-python``), pointed at a running LanguageTool server by URL or at a
  local LanguageTool installation by path.

Any object with ``count_errors(texts) -> list[int]`` works as a checker (tests use a stand-in).

Example::

    >>> from pmi_decode.metrics.grammar import grammar_error_rate
    >>> grammar_error_rate(["He have a car.", "The cat sat on the mat."])
    0.5
"""

from __future__ import annotations

import os
from typing import Iterable, Protocol, Sequence, runtime_checkable

from ..responses import ends_in_abbreviation
from .registry import register_metric

__all__ = [
    "GrammarChecker",
    "GrammarCheckerUnavailable",
    "HarperChecker",
    "LanguageToolChecker",
    "QuireChecker",
    "get_checker",
    "grammar_error_rate",
    "grammar_metric",
    "BACKENDS",
]

HOW_TO_GET_ONE = (
    "Install one of the grammar checkers: `pip install \"quire-grammar[model]==0.3.4\"` (offline, GECToR-style "
    "tagger), `pip install harper-py` (offline, rule-based), or "
    "`pip install language-tool-python` together with a LanguageTool server (pass its URL, e.g. "
    "http://localhost:8081) or a local LanguageTool installation (pass its folder)."
)


class GrammarCheckerUnavailable(RuntimeError):
    """No grammar checker backend can be used; the message says how to get one."""


@runtime_checkable
class GrammarChecker(Protocol):
    """What the grammar-error rate needs from a checker."""

    def count_errors(self, texts: Sequence[str]) -> list[int]:
        """Number of proposed corrections in each text."""
        ...


class HarperChecker:
    """Harper (``harper-py``): offline, rule-based English checking.

    A flagged span counts as a correction when Harper suggests at least one fix for it (a flag
    without a fix proposes no correction). ``ignore_kinds`` drops whole lint kinds, e.g.
    ``("Spelling",)`` when rare names from the documents would otherwise count as errors; the
    kinds Harper knows include ``Agreement``, ``Grammar``, ``Spelling``, ``Repetition``,
    ``Capitalization``, ``Punctuation``, ``WordChoice`` and ``Miscellaneous``.
    """

    name = "harper"

    def __init__(self, *, dialect: str = "american", ignore_kinds: Iterable[str] = ()):
        try:
            import harper
        except ImportError:
            raise GrammarCheckerUnavailable(f"harper-py is not installed. {HOW_TO_GET_ONE}") from None
        dialects = {d.name.lower(): d for d in harper.Dialect}
        if dialect.lower() not in dialects:
            raise ValueError(f"dialect must be one of {sorted(dialects)}, got {dialect!r}")
        self._linter = harper.Linter(dialects[dialect.lower()])
        self.ignore_kinds = frozenset(ignore_kinds)

    def corrections(self, text: str) -> list[dict]:
        """The corrections Harper proposes for one text: kind, flagged text, message, suggestions."""
        if not isinstance(text, str):
            raise ValueError(f"text must be a string, got {type(text).__name__}")
        found = []
        for lint in self._linter.lint(text):
            if lint.suggestion_count == 0 or lint.lint_kind in self.ignore_kinds:
                continue
            found.append({
                "kind": lint.lint_kind,
                "text": lint.problem_text,
                "start": lint.span.start,
                "message": lint.message,
                "suggestions": [s.replacement_text for s in lint.suggestions],
            })
        return found

    def count_errors(self, texts: Sequence[str]) -> list[int]:
        return [len(self.corrections(t)) for t in _check_texts(texts)]


class LanguageToolChecker:
    """LanguageTool through ``language-tool-python``.

    Pass ``server_url`` (a running LanguageTool HTTP server, e.g. ``http://localhost:8081``) or
    ``local_path`` (the folder of a LanguageTool installation, which language-tool-python starts
    as a local server). A match counts as a correction when LanguageTool offers a replacement.
    Close the checker (or use it as a context manager) to stop a local server.
    """

    name = "languagetool"

    def __init__(self, *, server_url: str | None = None, local_path: str | None = None,
                 language: str = "en-US", ignore_rules: Iterable[str] = ()):
        if not server_url and not local_path:
            raise GrammarCheckerUnavailable(
                "LanguageToolChecker needs server_url= (a LanguageTool server, e.g. http://localhost:8081) "
                f"or local_path= (a local LanguageTool installation). {HOW_TO_GET_ONE}"
            )
        try:
            import language_tool_python
        except ImportError:
            raise GrammarCheckerUnavailable(f"language-tool-python is not installed. {HOW_TO_GET_ONE}") from None
        if local_path:
            if not os.path.isdir(local_path):
                raise GrammarCheckerUnavailable(f"local_path {local_path!r} is not a folder with a LanguageTool installation")
            # language-tool-python looks for LanguageTool under $LTP_PATH before downloading it.
            os.environ["LTP_PATH"] = str(local_path)
        try:
            self._tool = language_tool_python.LanguageTool(language, remote_server=server_url or None)
        except Exception as err:  # connection refused, Java missing, download blocked, ...
            where = server_url or local_path
            raise GrammarCheckerUnavailable(f"could not start or reach LanguageTool at {where}: {err}. {HOW_TO_GET_ONE}") from None
        self.ignore_rules = frozenset(ignore_rules)

    def corrections(self, text: str) -> list[dict]:
        if not isinstance(text, str):
            raise ValueError(f"text must be a string, got {type(text).__name__}")
        found = []
        for match in self._tool.check(text):
            rule = getattr(match, "ruleId", None) or getattr(match, "rule_id", None)
            if not match.replacements or rule in self.ignore_rules:
                continue
            found.append({"kind": getattr(match, "category", None), "rule": rule, "message": match.message,
                          "start": match.offset, "suggestions": list(match.replacements)})
        return found

    def count_errors(self, texts: Sequence[str]) -> list[int]:
        return [len(self.corrections(t)) for t in _check_texts(texts)]

    def close(self) -> None:
        self._tool.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


#: quire rules the default checker leaves off (see :class:`QuireChecker`).
QUIRE_OFF = ("style", "space-before-punctuation", "missing-space-after-sentence")


class QuireChecker:
    """quire-grammar: a GECToR-style edit tagger (distilbert, int8 ONNX; ``quire-grammar[model]``)
    behind a layer of narrow, high-precision rules, offline.

    GECToR tags each word with an edit (keep, replace, append, delete, ...); a response is
    ungrammatical when some word gets an edit other than keep, which is how the PMI-Decode paper
    counted errors. ``tagger_only=True`` keeps the tagger's edits alone (the rules off); by default
    the rules add what the tagger misses, except those in :data:`QUIRE_OFF`: the ``style``
    category (passive voice, long sentences: not grammar) and the two spacing rules (a space
    before "?" or after "." reflects how a data set was tokenised, not the writer's grammar;
    GECToR reads tokenised text and never sees it). ``disable`` takes rule ids or categories.
    As with the other backends, only flags with a suggested fix count. quire's rule for a lower-case
    word after a period knows the abbreviations of fiction ("Dr.", "e.g.") but not those of the
    documents responses quote ("Marvel Worldwide Inc. and Timely", "Acme Corp. and"), so its flags
    after any word of :data:`pmi_decode.responses.ABBREVIATIONS` are dropped.
    """

    name = "quire"
    #: Saved with scores, so a change of the checker's behaviour re-grades saved responses.
    version = "quire-grammar 0.3.4; abbreviations 1"

    def __init__(self, *, tagger_only: bool = False, disable: Iterable[str] | None = None,
                 min_confidence: float = 0.0):
        try:
            import quire_grammar
        except ImportError:
            raise GrammarCheckerUnavailable(f"quire-grammar is not installed. {HOW_TO_GET_ONE}") from None
        try:
            from quire_grammar.model import is_available
        except ImportError:
            is_available = None
        if is_available is None or not is_available():
            raise GrammarCheckerUnavailable(
                "quire-grammar is installed without its tagger model (onnxruntime, quire-grammar-model); "
                f"install `quire-grammar[model]==0.3.4`. {HOW_TO_GET_ONE}"
            )
        self._check = quire_grammar.check
        self.tagger_only = bool(tagger_only)
        self.disable = tuple(quire_grammar.CATEGORIES) if self.tagger_only else tuple(
            QUIRE_OFF if disable is None else disable)
        self.min_confidence = float(min_confidence)

    def corrections(self, text: str) -> list[dict]:
        """The corrections proposed for one text: category, rule, flagged text, suggestions."""
        if not isinstance(text, str):
            raise ValueError(f"text must be a string, got {type(text).__name__}")
        if not text.strip():
            return []
        found = []
        for c in self._check(text, disable=self.disable, min_confidence=self.min_confidence):
            if not c.suggestions:
                continue
            if c.rule_id == "capitalization-after-period" and ends_in_abbreviation(text[:c.start].rstrip()):
                continue
            found.append({"kind": c.category, "rule": c.rule_id, "text": c.original, "start": c.start,
                          "message": c.message, "suggestions": list(c.suggestions)})
        return found

    def count_errors(self, texts: Sequence[str]) -> list[int]:
        return [len(self.corrections(t)) for t in _check_texts(texts)]


BACKENDS = {"quire": QuireChecker, "harper": HarperChecker, "languagetool": LanguageToolChecker}

#: The backend used when none is named, chosen by the comparison in docs/metrics.md.
DEFAULT_BACKEND = "quire"


def _check_texts(texts) -> list[str]:
    if isinstance(texts, str):
        raise ValueError("texts must be a list of responses, got a single string")
    texts = list(texts)
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            raise ValueError(f"texts[{i}] must be a string, got {type(t).__name__}")
    return texts


def get_checker(backend: str | GrammarChecker | None = DEFAULT_BACKEND, **options) -> GrammarChecker:
    """A checker from a backend name (``quire``, ``harper``, ``languagetool``) or a ready checker
    object. ``None`` tries quire, then Harper, then LanguageTool with the given options; if none
    can be used the error says how to get one."""
    if backend is not None and not isinstance(backend, str):
        if not hasattr(backend, "count_errors"):
            raise ValueError("a grammar checker object needs a count_errors(texts) method")
        return backend
    if backend is None:
        errors = []
        for name, cls in BACKENDS.items():
            try:
                return cls(**{k: v for k, v in options.items() if k in _OPTIONS[name]})
            except GrammarCheckerUnavailable as err:
                errors.append(f"{name}: {err}")
        raise GrammarCheckerUnavailable("no grammar checker is available (" + "; ".join(errors) + ")")
    key = backend.lower().replace("-", "").replace("_", "")
    key = {"languagetoolpython": "languagetool", "lt": "languagetool", "harperpy": "harper",
           "quiregrammar": "quire"}.get(key, key)
    if key not in BACKENDS:
        raise ValueError(f"unknown grammar backend {backend!r}; choose one of {sorted(BACKENDS)}")
    unknown = set(options) - _OPTIONS[key]
    if unknown:
        raise ValueError(f"unknown option(s) {sorted(unknown)} for the {key} backend; known: {sorted(_OPTIONS[key])}")
    return BACKENDS[key](**options)


_OPTIONS = {
    "quire": {"tagger_only", "disable", "min_confidence"},
    "harper": {"dialect", "ignore_kinds"},
    "languagetool": {"server_url", "local_path", "language", "ignore_rules"},
}


def _is_error_flags(texts: Sequence[str], checker) -> list[bool]:
    texts = _check_texts(texts)
    counts = list(checker.count_errors(texts))
    if len(counts) != len(texts):
        raise ValueError(f"the grammar checker returned {len(counts)} counts for {len(texts)} texts")
    return [c > 0 for c in counts]


def grammar_error_rate(texts: Sequence[str], checker: GrammarChecker | str | None = None) -> float:
    """Share of ``texts`` for which the checker proposes at least one correction (0..1).

    ``checker`` is a checker object, a backend name, or ``None`` for the default (:data:`DEFAULT_BACKEND`).
    Empty responses count as grammatical (there is nothing to correct); an empty list is an error.
    """
    checker = get_checker(DEFAULT_BACKEND if checker is None else checker)
    flags = _is_error_flags(texts, checker)
    if not flags:
        raise ValueError("grammar_error_rate needs at least one response")
    return sum(flags) / len(flags)


_CHECKERS: dict = {}


def _cached_checker(backend: str, options: dict) -> GrammarChecker:
    """Checkers are slow to build (Harper loads its dictionary): keep one per backend and options."""
    key = (backend, repr(sorted(options.items())))
    if key not in _CHECKERS:
        _CHECKERS[key] = get_checker(backend, **options)
    return _CHECKERS[key]


def grammar_metric(documents, histories, responses, *, grammar_checker: GrammarChecker | None = None,
                   grammar_backend: str = DEFAULT_BACKEND, grammar_options: dict | None = None, **_) -> list[dict]:
    """Corrections the grammar checker proposes (grammar_errors) and whether there is any
    (ungrammatical, 0/1; its mean is the grammar-error rate); quire's GECToR-style tagger by default.

    The scoring-registry entry (``pmi-decode score --metrics grammar``); other scoring options
    are ignored."""
    checker = grammar_checker or _cached_checker(grammar_backend, dict(grammar_options or {}))
    flags_counts = list(checker.count_errors(_check_texts(responses)))
    if len(flags_counts) != len(responses):
        raise ValueError(f"the grammar checker returned {len(flags_counts)} counts for {len(responses)} texts")
    return [{"grammar_errors": int(c), "ungrammatical": int(c > 0)} for c in flags_counts]


register_metric("grammar", grammar_metric, reads=())
