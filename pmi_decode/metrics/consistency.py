"""ConsisTest's hybrid scorer: is a dialogue model's answer consistent with a fact it stated before?

Lotfi et al. (2022), "What Was Your Name Again? Interrogating Generative Conversational Models
for Factual Consistency Evaluation". A model is asked a WH or yes/no question about a fact in
its persona or earlier in the conversation; its answer is scored 0..1 against the reference
answer ``a`` (alternatives separated by " | ") and the reference fact (the NLI premise: the
rewritten fact ``alt_c`` when there is one, else the fact sentence ``c``). NLI alone fails on
short answers ("I do.", neutral to the fact), on partly right WH answers (neutral: no partial
credit) and on yes/no answers whose short and long parts disagree; rules come first:

Yes/no questions (expected polarity: "no" when an alternative of ``a`` is "no", else "yes"):

1. an empty response scores 0 (``empty_response``);
2. it opens with a yes/no word of the wrong polarity: 0 (``yes_no_word_disagrees``);
3. it opens with the right yes/no word and then a short answer of the wrong polarity ("yes, I
   don't"): 0 (``short_and_long_parts_disagree``); of the right polarity ("yes, I do"): 1
   (``short_answer_agrees``);
4. it opens with the right yes/no word and nothing decisive follows: 1 unless NLI finds a
   contradiction with the fact, then 0 (``yes_no_word_agrees`` / ``..._nli_contradiction``);
5. it opens with a short answer ("I do.", "I'm not", "she isn't"): 1 if its polarity agrees, else
   0 (``short_answer_agrees`` / ``short_answer_disagrees``);
6. no rule fires: NLI decides, entailment 1, otherwise 0 (``nli_entailment`` /
   ``nli_no_entailment``).

A trailing question back to the user ("... Do you have pets?") is dropped from every response
before the rules and NLI see it.

WH questions:

1. an empty response scores 0;
2. NLI is a safeguard: a contradiction of the fact scores 0 (``nli_contradiction``);
3. otherwise the recall of the answer's keywords in the response (articles ignored, number
   words as digits, best alternative; ``keyword_recall``);
4. when every alternative has more than ``max_keywords`` keywords (a clause, not a phrase),
   NLI decides: entailment 1, otherwise 0 (``long_answer_nli_entailment`` / ``..._no_entailment``).

Without an NLI model (``nli=None``) the rules still run: decisions that NLI only guards
(rule 4 of yes/no, rule 3 of WH) keep the rule's score with ``nli_checked`` False, an upper
bound; decisions that NLI alone makes get ``score`` None (``needs_nli``) and are counted as
undecided by :func:`summarize`.

Every result explains itself: ``decision``, a sentence in ``explanation``, the matched yes/no
word or short form, the keywords found and missing, and the NLI premise, label and probabilities.

    >>> from pmi_decode.metrics.consistency import ConsistencyScorer
    >>> scorer = ConsistencyScorer(nli=None)          # rules only; or nli="FacebookAI/roberta-large-mnli"
    >>> r = scorer.score(["do you have a cat?"], ["No, I don't."], ["no"], ["yn"], ["i've a bird"])[0]
    >>> r["score"], r["decision"]
    (1.0, 'short_answer_agrees')
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Sequence

from .consistency_rules import (
    expected_polarity,
    keyword_recall,
    keywords,
    normalize,
    short_answer_polarity,
    short_answers,
    strip_counter_question,
    yes_no_word,
)
from .nli import DEFAULT_NLI, NLI

__all__ = ["ConsistencyScorer", "DECISIONS", "summarize", "DEFAULT_NLI"]

DECISIONS = (
    "empty_response", "yes_no_word_disagrees", "short_and_long_parts_disagree", "short_answer_agrees",
    "short_answer_disagrees", "yes_no_word_agrees", "yes_no_word_agrees_nli_contradiction", "nli_entailment",
    "nli_no_entailment", "nli_contradiction", "keyword_recall", "long_answer_nli_entailment",
    "long_answer_nli_no_entailment", "needs_nli",
)
TYPES = ("yn", "wh")


class ConsistencyScorer:
    """The hybrid scorer, batched: rules for every item, one NLI call for the items that need it.

    Args:
        nli: an :class:`~pmi_decode.metrics.nli.NLI`, anything ``NLI`` accepts (a model id or
            folder, a ``(model, tokenizer)`` pair, a Pipeline, a callable), or None for rules only.
            Default: ``FacebookAI/roberta-large-mnli`` (needs the hub or a local copy).
        max_keywords: WH answers with more keywords than this (in every alternative) are judged
            by NLI instead of keyword recall (5, as in the authors' code).
        device, batch_size: passed to :class:`NLI` when ``nli`` is not one already.
    """

    def __init__(self, nli: Any = DEFAULT_NLI, *, max_keywords: int = 5, device=None, batch_size: int = 16):
        if isinstance(max_keywords, bool) or not isinstance(max_keywords, int) or max_keywords < 1:
            raise ValueError(f"`max_keywords` must be a positive integer, got {max_keywords!r}")
        self.nli = nli if nli is None or isinstance(nli, NLI) else NLI(nli, device=device, batch_size=batch_size)
        self.max_keywords = max_keywords

    def score(self, questions: Sequence[str], responses: Sequence[str], answers: Sequence[str],
              types: Sequence[str], facts: Sequence[str]) -> list[dict]:
        """Score each response; parallel lists. ``answers`` are the references (``"a | b"`` for
        alternatives), ``types`` "yn" or "wh", ``facts`` the NLI premises. One dict per item."""
        columns = {"questions": questions, "responses": responses, "answers": answers, "types": types, "facts": facts}
        for name, values in columns.items():
            if isinstance(values, str):
                raise ValueError(f"`{name}` must be a list of strings, not a single string")
        lengths = {name: len(values) for name, values in columns.items()}
        if len(set(lengths.values())) != 1:
            raise ValueError(f"questions, responses, answers, types and facts must have the same length, got {lengths}")
        for i, kind in enumerate(types):
            if kind not in TYPES:
                raise ValueError(f"item {i}: type must be 'yn' or 'wh', got {kind!r}")
        for name, values in columns.items():
            for i, value in enumerate(values):
                if not isinstance(value, str):
                    raise ValueError(f"item {i}: `{name[:-1]}` must be a string, got {type(value).__name__}")
        results = [self._rules(q, r, a, t, f) for q, r, a, t, f in zip(questions, responses, answers, types, facts)]
        todo = [i for i, res in enumerate(results) if res.pop("_nli")]
        if todo and self.nli is not None:
            judged = self.nli.predict([results[i]["nli_premise"] for i in todo],
                                      [results[i]["clean_response"] for i in todo])
            for i, nli in zip(todo, judged):
                _apply_nli(results[i], nli)
        elif todo:
            for i in todo:
                _without_nli(results[i])
        return results

    # ------------------------------------------------------------------ rules

    def _rules(self, question: str, response: str, answer: str, kind: str, fact: str) -> dict:
        clean = strip_counter_question(response)  # "... Do you have pets?" is not part of the answer
        result = {"type": kind, "question": question, "response": response, "clean_response": clean,
                  "reference": answer, "nli_premise": fact, "score": None, "decision": None, "explanation": "",
                  "nli_label": None, "nli_probabilities": None, "nli_checked": False, "_nli": False}
        if not response.strip():
            return _decide(result, 0.0, "empty_response", "The response is empty.")
        return self._yes_no(result, question, clean, answer) if kind == "yn" else self._wh(result, clean, answer)

    def _yes_no(self, result: dict, question: str, clean: str, answer: str) -> dict:
        expected = expected_polarity(answer)
        text = normalize(clean)
        forms = short_answers(question)
        result.update(expected=expected, yes_no_word=None, short_answer=None,
                      short_forms=None if forms is None else {"yes": list(forms.positive), "no": list(forms.negative)})
        polarity, word, rest = yes_no_word(text)
        result["yes_no_word"] = word
        if polarity is not None and polarity != expected:
            return _decide(result, 0.0, "yes_no_word_disagrees",
                           f"The response opens with {word!r} ({polarity}); the fact says {expected}.")
        if forms is not None:
            short, form = short_answer_polarity(rest if polarity else text, forms)
            result["short_answer"] = form
            if short is not None and polarity is not None:
                if short == expected:
                    return _decide(result, 1.0, "short_answer_agrees",
                                   f"{word!r} and the short answer {form!r} both say {expected}, as the fact does.")
                return _decide(result, 0.0, "short_and_long_parts_disagree",
                               f"{word!r} says {polarity} but the short answer {form!r} that follows says {short}.")
            if short is not None:
                if short == expected:
                    return _decide(result, 1.0, "short_answer_agrees",
                                   f"The short answer {form!r} says {short}, as the fact does.")
                return _decide(result, 0.0, "short_answer_disagrees",
                               f"The short answer {form!r} says {short}; the fact says {expected}.")
        if polarity is not None:
            result.update(score=1.0, decision="yes_no_word_agrees", _nli=True,
                          explanation=f"The response opens with {word!r} ({polarity}), as the fact says; "
                                      f"it counts unless NLI finds the rest contradicts the fact.")
            return result
        result.update(_nli=True, decision="needs_nli",
                      explanation="No yes/no word or short answer opens the response; NLI against the fact decides.")
        return result

    def _wh(self, result: dict, clean: str, answer: str) -> dict:
        alternatives = [a.strip() for a in answer.split("|") if a.strip()]
        if not alternatives:
            raise ValueError(f"the reference answer {answer!r} of a WH question is empty")
        short = [a for a in alternatives if len(set(keywords(a))) <= self.max_keywords]
        result["alternatives"] = alternatives
        if not short:
            result.update(_nli=True, decision="needs_nli", keywords=None,
                          explanation=f"Every reference answer has more than {self.max_keywords} keywords; "
                                      f"NLI against the fact decides.")
            return result
        # every alternative is compared, long ones too: "a cat | my neighbour's grey cat called tom"
        # is answered by either, and dropping the long one would miss a response that gives it
        best = max(((a, *keyword_recall(a, clean)) for a in alternatives), key=lambda x: x[1])
        alternative, recall, found, missing = best
        result["keywords"] = {"alternative": alternative, "found": found, "missing": missing, "recall": recall}
        result.update(score=recall, decision="keyword_recall", _nli=True,
                      explanation=f"{len(found)} of {len(found) + len(missing)} keywords of {alternative!r} are in the "
                                  f"response (recall {recall:.2f}), unless NLI finds a contradiction of the fact.")
        return result


def _decide(result: dict, score: float, decision: str, explanation: str) -> dict:
    result.update(score=score, decision=decision, explanation=explanation)
    return result


def _apply_nli(result: dict, nli: dict) -> None:
    label = nli["label"]
    result.update(nli_label=label, nli_checked=True,
                  nli_probabilities={k: nli[k] for k in ("entailment", "neutral", "contradiction")})
    decision = result["decision"]
    if decision == "yes_no_word_agrees":
        if label == "contradiction":
            _decide(result, 0.0, "yes_no_word_agrees_nli_contradiction",
                    f"The response opens with {result['yes_no_word']!r} as the fact says, but NLI finds the response "
                    f"contradicts the fact.")
        else:
            result["explanation"] = (f"The response opens with {result['yes_no_word']!r} as the fact says and NLI "
                                     f"finds no contradiction ({label}).")
    elif decision == "keyword_recall":
        if label == "contradiction":
            _decide(result, 0.0, "nli_contradiction",
                    f"NLI finds the response contradicts the fact (keyword recall was {result['keywords']['recall']:.2f}).")
        else:
            result["explanation"] += f" NLI: {label}, no contradiction."
    elif result["type"] == "wh":  # a long reference answer
        if label == "entailment":
            _decide(result, 1.0, "long_answer_nli_entailment", "The fact entails the response (long reference answer).")
        else:
            _decide(result, 0.0, "long_answer_nli_no_entailment",
                    f"The fact does not entail the response ({label}; long reference answer).")
    elif label == "entailment":
        _decide(result, 1.0, "nli_entailment", "No rule decided; the fact entails the response.")
    else:
        _decide(result, 0.0, "nli_no_entailment", f"No rule decided; the fact does not entail the response ({label}).")


def _without_nli(result: dict) -> None:
    """Rules only: a guarded rule keeps its score (unchecked); an NLI-only decision stays undecided."""
    if result["decision"] in ("yes_no_word_agrees", "keyword_recall"):
        result["explanation"] += " (NLI not run: not checked for a contradiction.)"
    else:
        result.update(score=None, decision="needs_nli", explanation=result["explanation"] + " (NLI not run.)")


def summarize(results: Sequence[dict], sources: Sequence[str] | None = None) -> dict:
    """Mean scores overall, by type (yn / wh), by source and by source x type, as the paper's tables.

    ``sources`` (parallel to ``results``) names each item's source, e.g. "persona" / "history".
    Each cell holds ``score`` (mean over decided items, None when none), ``n`` (items),
    ``decided`` and ``unchecked`` (scored by a rule NLI would have guarded, NLI not run).
    """
    if sources is not None and len(sources) != len(results):
        raise ValueError(f"got {len(results)} results but {len(sources)} sources")
    cells: dict[str, list[dict]] = defaultdict(list)
    for i, result in enumerate(results):
        keys = ["all", f"type={result['type']}"]
        if sources is not None:
            keys += [f"source={sources[i]}", f"source={sources[i]},type={result['type']}"]
        for key in keys:
            cells[key].append(result)
    out = {}
    for key, items in sorted(cells.items(), key=lambda kv: (kv[0] != "all", kv[0])):
        scores = [r["score"] for r in items if r["score"] is not None]
        out[key] = {"score": sum(scores) / len(scores) if scores else None, "n": len(items), "decided": len(scores),
                    "unchecked": sum(1 for r in items if r["score"] is not None and not r["nli_checked"]
                                     and r["decision"] in ("yes_no_word_agrees", "keyword_recall"))}
    decisions: dict[str, int] = defaultdict(int)
    for result in results:
        decisions[result["decision"]] += 1
    out["decisions"] = dict(sorted(decisions.items()))
    return out
