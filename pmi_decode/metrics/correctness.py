"""Is the response correct: does it answer with the document's facts intact, or say the document
does not tell?

Faithfulness scores that reward copying (PMI-Faith, knowledge F1) call a garbled copy of the
document faithful: "open 9 am to 4 pm" copies "9 am" and "4 pm" from a document that says 9 am to
8 pm on weekdays and 10 am to 4 pm on Saturdays. A reader judges a response by whether it answers
the question with the facts right. These measures do that:

* :func:`answer_match` - a reference answer occurs in the response (SQuAD normalisation, whole
  words); :func:`answer_recall` - the share of a reference answer's words the response holds
  (the best reference). Defined only where reference answers exist.
* :func:`abstains` - the response says the document (or the speaker) does not tell, instead of
  asserting an answer. On a question the document cannot answer, a response that does not
  abstain asserts an invented answer.
* ``answers_intact`` - the response holds a reference answer *and* no wrong number or name: the
  answer with the document's facts intact. Answer match alone credits a recitation that holds
  the answer beside a wrong one ("the deadline is 1 March ... the closing date is 31 October").
* ``abstains_answerable`` - the response abstains on a question the document answers. Abstaining
  is right only where the document does not tell: a system that says "I don't know" as often on
  answerable questions as on unanswerable ones abstains at random, whatever its rate on the
  unanswerable ones.
* :func:`recited_share` - the share of the response's words that come after the sentence that
  answers (the first sentence holding a reference answer; without references, the first
  sentence): what was recited past the answer. ``response_words`` is the length.
* wrong facts (:func:`pmi_decode.metrics.fact_support.wrong_facts`): a number, date or name
  that the sources do not state *in that context*.

How each was checked against hand labels: ``docs/metrics.md`` ("Correctness").
"""

from __future__ import annotations

import re
from typing import Sequence

from .fact_support import _compound_numbers, number_value, wrong_facts
from .text import normalize_answer, porter_stem, sentences, text_list, words
from .token_aggregation import load_nlp, load_nlp_ner

__all__ = [
    "answer_match",
    "answer_recall",
    "abstains",
    "recited_share",
    "response_words",
    "correctness_measures",
    "CORRECTNESS_COLUMNS",
]

#: Columns :func:`correctness_measures` writes (``None`` where undefined for a row).
CORRECTNESS_COLUMNS = ("answer_match", "answer_recall", "answers_intact", "abstains", "asserts_unanswerable",
                       "abstains_answerable", "wrong_facts", "wrong_numbers", "wrong_names", "recited_share",
                       "response_words")

# Ways of saying "the document does not tell" / "I don't know". Each pattern needs a verb of
# telling or knowing, or a noun of information, so that a negative answer ("the museum is not
# open on Mondays", "he did not win") does not count as abstaining.
_TELL = (r"(?:say|says|said|mention|mentions|mentioned|specify|specifies|specified|state|states|stated|tell|"
         r"tells|told|provide|provides|provided|include|includes|included|contain|contains|give|gives|given|"
         r"indicate|indicates|indicated|list|lists|listed|show|shows|shown|cover|covers|covered|address|name|names|named|"
         r"addresses|addressed|note|notes|noted|reveal|reveals|disclose|discloses|describe|describes|described|"
         r"explain|explains|explained|clarify|clarifies|clarified|quote|quotes|quoted|confirm|confirms|confirmed|"
         r"(?:set|sets|spell|spells|spelled|spelt)\s+out|(?:go|goes|went)\s+into)")
_SOURCE = (r"(?:document|text|passage|article|page|information|context|source|website|site|description|details?|info|"
           r"leaflet|brochure|sheet|notes|menu|announcement|syllabus|guide|listing|schedule|timetable|excerpt|manual|"
           r"policy|pamphlet|flyer|notice|post|entry|record|records|material|booklet|review|report|newsletter|letter|"
           r"sign|poster|bulletin|programme|program|catalogue|catalog|faq|invoice|email|summary|terms|contract|lease|"
           r"agreement|statement|confirmation|receipt|invitation|invite|handbook|instructions|itinerary|quote|"
           r"payslip|certificate|bill|label|reminder|renewal|welcome pack|"
           r"what (?:i|we) (?:have|know|was given))")
# "doesn't say", "isn't mentioned": a verb of telling, negated. Some of those verbs are verbs of having
# too ("the fare doesn't include meals", "water damage isn't covered" answer): see _said_of_information.
_NEGATED_TELLING_PATTERNS = [
    rf"\b(?:does|do|did)\s*(?:not|n't)\s+(?:\w+\s+){{0,2}}{_TELL}\b",
    rf"\b(?:doesn't|don't|didn't|isn't|aren't|wasn't|weren't|is not|are not|was not|were not|not)\s+(?:\w+\s+){{0,1}}"
    rf"(?:{_TELL}|known|clear|available|specified|mentioned|stated|listed|given|provided|included)\b"
    rf"(?:\s+(?:in|on|by|from)\s+(?:the|this|that|my|our)?\s*{_SOURCE})?"
    rf"(?=\W*$|\s*[.,;:!?\u2013\u2014-]|\s+(?:in|on|here|there|anywhere|by|from|for|either|at\s+all|whatsoever|"
    rf"though|however)\b)",
    # "the timetable has no prices on it", "it gives no reason", "no email address is given", "no country of
    # manufacture listed" (with a verb of having only as _said_of_information allows: "the kit has no batteries")
    r"\b(?:has|have|gives?|lists?|shows?|includes?|quotes?|mentions?|states?|carries|offers?)\s+no\b",
    r"\bno\s+(?:[\w-]+\s+){0,5}?(?:is\s+|are\s+|was\s+|were\s+)?(?:given|listed|stated|mentioned|specified|shown|"
    r"provided|included|quoted|printed|noted|named|(?:set|spelled|spelt)\s+out)\b",
    # "hours of operation are left out" (what is left out must be information: "tomatoes are left out" answers)
    r"\b(?:is|are|was|were|been)\s+left\s+out\b",
]
_ABSTAIN_PATTERNS = [
    rf"\b(?:no|not any|nothing)\s+(?:\w+\s+){{0,1}}(?:information|mention|details?|data|record|indication|word|info|reference|answer)\b",
    r"\b(?:no|not the (?:slightest|faintest|foggiest))\s+(?:idea|clue)\b",
    r"\b(?:is|are|was|were)\s+(?:left\s+)?(?:blank|empty)\b",
    r"\b(?:no|nothing)\b[^.?!]{0,30}\beither\s+way\b",
    r"\bthere(?:'s| is| was)\s+nothing\s+(?:(?:in|on)\s+(?:\w+\s+){1,3})?(?:about|regarding|concerning|on)\b",
    r"(?:^|[,;:.!?-])\W*nothing\s+(?:(?:on|in)\s+(?:there|here|it|them)\s+)?(?:on|about|regarding)\b",
    # "on livestock or poultry there's nothing"; "baggage allowance doesn't appear on the itinerary"
    r"\b(?:on|about)\s+(?:[\w-]+\s+){1,4}there(?:'s| is)\s+nothing\W*$",
    r"\b(?:doesn't|does not|don't|do not|isn't|is not|aren't|are not)\s+(?:appear|feature|show\s+up|come\s+up)\s+"
    r"(?:on|in|anywhere)\b",
    r"^\W*(?:it's\s+|that's\s+|it is\s+|that is\s+)?not\s+in\s+(?:there|here)\b",
    r"^\W*(?:i'm\s+|i am\s+)?not\s+(?:really\s+|quite\s+|too\s+)?(?:sure|certain)\b",
    r"\b(?:no|not any|not a|there's no|there is no)\s+(?:\w+\s+)?(?:way|means)\s+(?:for me\s+|of\s+)?(?:to\s+)?(?:know|knowing|tell|telling|say|saying|determine)\b",
    r"\b(?:hard|difficult|impossible|not possible)\s+to\s+(?:say|tell|know|determine)(?=\W*$|\s*[.,;:!?]|\s+(?:from|which|what|who|"
    r"when|where|whether|how|if|for sure|exactly|based|without)\b)",
    r"\b(?:does|do|did)\s*(?:not|n't)\s+answer\s+(?:this|that|the|your)\s+question\b",
    r"\b(?:i|we)\s+(?:\w+ly\s+)?(?:don't|do not|can't|cannot|can not|couldn't|could not|am not able to|'m not able to|"
    r"am unable to|'m unable to|have no way to)\s+(?:\w+\s+){0,1}(?:know|find|tell|say|answer|determine|see|confirm|locate|help with|"
    r"(?:work|figure|make)\s+out)\b",
    r"\b(?:i|we)\s+(?:don't|do not)\s+have\s+(?:any\s+)?(?:\w+\s+){0,1}(?:information|details?|data|info|answer|record)",
    # "I don't have that number" (not "I don't have a name for my dog")
    r"\b(?:i|we)\s+(?:don't|do not)\s+have\s+(?:that|this|the|those|these|any)\s+(?:exact\s+|specific\s+|precise\s+)?"
    r"(?:numbers?|figures?|dates?|names?|amounts?|prices?|costs?|specifics)\b",
    r"\b(?:i|we)\s+(?:don't|do not)\s+have\s+(?:that|this|it)(?=\s*(?:[;,.!?]|$))",
    r"\b(?:i'm|i am|we're|we are)\s+not\s+(?:\w+\s+){0,1}(?:sure|certain|aware)\b",
    r"\b(?:i'm|i am|we're|we are)\s+not\s+(?:seeing|finding|spotting)\b",
    # "so there isn't a total in here yet"
    r"\bthere\s+(?:isn't|is not|aren't|are not)\s+(?:a|an|any)\s+[\w\s-]{1,30}?\s+in\s+(?:here|there)\b",
    r"\b(?:unable|not able|wasn't able|was not able|weren't able)\s+to\s+(?:find|answer|determine|tell|say|confirm|locate)\b",
    r"\b(?:i|we)\s+(?:have|had|'ve got)\s+nothing\s+(?:on|about|regarding)\b",
    r"\b(?:is|are|was|were|'s|stays|remains)\s+silent\s+(?:on|about)\b",
    r"\b(?:couldn't|could not|can't|cannot|wasn't able to|was unable to|didn't)\s+(?:find|see|spot|locate)\b",
    rf"\bnothing\s+(?:in|on)\s+(?:the|this|that|my|our)\s+(?:\w+\s+){{0,2}}{_TELL}\b",
    r"\b(?:leaves?|left|leaving)\s+(?:that|this|it|those|these)\s+out\b",
    rf"\b(?:isn't|is not|aren't|are not|wasn't|was not)\s+(?:in|on|part of)\s+(?:the\s+|this\s+|my\s+|our\s+)?{_SOURCE}\b",
    r"\bbeyond what\b",
    r"\b(?:rather not|won't|can't|cannot)\s+guess\b",
    r"\bnot something\s+(?:that\s+)?(?:i|we)(?:'m| am| are|'re)?\s+(?:able to|can)\b",
    r"\b(?:unknown|unclear|not known|no way to know|not clear)\b",
    rf"\b(?:no|nothing)\b[^.?!]{{0,40}}\b(?:in|on)\s+(?:the|this|that)\s+{_SOURCE}\b",
    r"(?:\bnot|n't)\s+(?:something|a detail|a thing|anything)\s+(?:that\s+)?(?:the|this|i|we)\b[^.?!]{0,30}"
    r"\b(?:cover|mention|say|know|have|specif|state|give|list|include|tell|go(?:es)? into|work out|figure out|"
    r"determine|confirm|answer)",
    r"\bcan't (?:help|answer) (?:you )?with that\b",
    rf"\b{_TELL}\s+nothing\s+(?:about|on|of|regarding|as to)\b",
    r"^\W*(?:can't|cannot|can not|couldn't)\s+(?:really\s+)?(?:say|tell)\b",
    rf"\b(?:it|they|the\s+\w+|this\s+\w+)\s+{_TELL}\b[^.?!]{{0,80}}\bbut\s+not\s+(?:who|what|when|where|why|how|which|whether)\b",
    # "the notice doesn't go into that", "that detail is missing from the guide", "the review never names the chef"
    r"\b(?:does|do|did)\s*(?:not|n't)\s+go\s+into\s+(?:that|this|it|detail|details|specifics)\b",
    rf"\bmissing\s+from\s+(?:the|this|that|your|my|our)\s+(?:\w+\s+){{0,2}}{_SOURCE}\b",
    rf"\b(?:it|they|he|she|the\s+\w+|this\s+\w+|but)\s+never\s+(?:\w+\s+){{0,1}}{_TELL}\b",
    # "the page only covers the weekday timetable, not Sunday services", "it talks about X but not Y"
    # (not when a colon goes on to the answer: "it lists the lunch prices but not the dinner ones: lunch is 12 euros")
    # "the events page only gives the date, not an age range", "the list gives the venue but no kick-off time"
    rf"\b(?:it|they|the\s+\w+(?:\s+\w+)?|this\s+\w+)\s+(?:only\s+)?(?:{_TELL}|talks?\s+about|discuss(?:es)?|"
    rf"deals?\s+with|goes\s+into)\b[^.?!]{{0,80}}(?:,\s*|\bbut\s+)(?:not|no)\s+"
    rf"(?!(?:more|less|fewer|later|earlier|longer|sooner)\s+than\b)(?:about\s+|on\s+)?\w+(?![^.?!]*:)",
]
_NEGATED_TELLING = [re.compile(p, re.IGNORECASE) for p in _NEGATED_TELLING_PATTERNS]
_ABSTAIN = [re.compile(p, re.IGNORECASE) for p in _ABSTAIN_PATTERNS]
# Verbs of telling that are verbs of having too, and what a source tells: with them, "doesn't include"
# is a hedge only when the source does not include, or what is not included is information.
_HAVING = re.compile(r"\b(?:include[sd]?|contain(?:s|ed)?|provide[sd]?|cover(?:s|ed)?|has|have|shows?|carries|offers?|"
                     r"left\s+out)\b",
                     re.IGNORECASE)
_INFORMATION = (r"(?:information|info|details?|data|figures?|numbers?|times?|dates?|prices?|costs?|reasons?|"
                r"explanation|answer|names?|breakdown|estimates?|amounts?|hours|specifics|indication|word|codes?|"
                r"timescales?|timeframes?)")
# the source as the subject: "the menu", "the information provided", "the text I was given", "the
# amenities list", "the page, which" (not "the confirmation shows a fare, which"); or "it" / "they"
# after the source was named ("I went by the rules page you shared, and it doesn't cover barbecues")
_SOURCE_SUBJECT = re.compile(rf"(?:\b(?:{_SOURCE}|list|recipe|rules)s?|\b(?:i|we))(?:\s+(?!(?:a|an|the)\b)[\w']+){{0,4}}?"
                             rf"(?:\W+(?:which|that))?\W*$", re.IGNORECASE)
_PRONOUN_SUBJECT = re.compile(r"\b(?:it|they|this|that)\W*$", re.IGNORECASE)
_PRONOUN_AFTER = re.compile(r"\s+in\s+(?:it|them|there)\b", re.IGNORECASE)
_SOURCE_NAMED = re.compile(rf"\b{_SOURCE}s?\b", re.IGNORECASE)
_SOURCE_AFTER = re.compile(rf"\s+(?:in|on|by|from)\s+(?:the|this|that|my|our|your)?\s*(?:\w+\s+)?{_SOURCE}s?\b",
                           re.IGNORECASE)
_INFORMATION_OBJECT = re.compile(rf"^\s+(?:[\w']+\s+){{0,3}}?{_INFORMATION}\b", re.IGNORECASE)
_PASSIVE = re.compile(r"(?:isn't|aren't|wasn't|weren't|is not|are not|was not|were not|not|is|are|was|were|been)\b",
                      re.IGNORECASE)
_QUESTION_SUBJECT = re.compile(r"(?:^|[,;:.!?])\W*(?:what|whether|who|when|where|why|how|which)\b[^,;:.!?]*$",
                               re.IGNORECASE)
_INFORMATION_SUBJECT = re.compile(rf"\b{_INFORMATION}\W+(?:\w+\W+){{0,2}}$", re.IGNORECASE)
# "I'm not sure, but I think it opens at 9" / "I don't know, but I'm pretty sure it was Bohemond": a
# hedge followed by an answer asserts the answer.
_HEDGED_ANSWER = re.compile(r"\bso\s+(?:my\s+(?:read|guess|take|bet)\b|i(?:'d| would)\s+(?:say|guess|take|assume)\b|"
                            r"i\s+(?:think|believe|guess|assume)\b)|"
                            r"\bbut\s+(?:(?:yes|no)(?=\s*,)|i\s+(?:think|believe|guess|suppose|would say)|"
                            r"(?:i'm|i am)\s+(?:pretty|fairly|quite|almost|reasonably)\s+(?:sure|certain|confident)|it(?:'s| is| was| should| looks| seems| appears)|"
                            r"(?:it|they|the\s+\w+(?:\s+\w+)?)\s+(?:(?:seems|appears)\s+to\s+(?:say|state|mention|list|show|give)|"
                            r"says|states|mentions|notes|lists|shows|gives)\b(?!\s+(?:to|nothing|no)\b)|"
                            r"there(?:'s| is| are| should)|they(?:'re| are| should)|probably|likely|maybe|perhaps|"
                            r"roughly|about|around|usually|most likely)\b", re.IGNORECASE)
# "I don't know. I think it was made out of silver.": a sentence that opens with a guess, after the
# hedge, asserts the guess as well; one that opens with advice ("Maybe ask at the desk", "I think
# it's best to call them", "It might be worth checking") does not.
_ADVICE = (r"(?!\s*,?\s*(?:you\b|ask|check|contact|try|call|visit|look|consider|email|phone|reach|"
           r"(?:it|that)(?:'s|\s+is|\s+would\s+be|'d\s+be)\s+(?:best|better|worth|wise|a\s+good\s+idea)|"
           r"(?:best|better|worth|wise|a\s+good\s+idea)\b|we\b|i\s+(?:can|could|would|will)\b|i'd\b|i'll\b|"
           r"(?:written\s+|printed\s+|listed\s+)?(?:on|in)\s+(?:a|an|the|your|their|its)\b))")
_GUESS_OPENING = re.compile(r"^\W*(?:(?:but|and|so|though|still)\b,?\s*)?(?:i\s+(?:think|believe|guess|suppose|would say)|"
                            r"i'd say|(?:i'm|i am)\s+(?:pretty|fairly|quite|almost|reasonably)\s+(?:sure|certain|confident)|"
                            r"my\s+(?:best\s+)?(?:guess|estimate)(?:\s+(?:is|would be))?|i(?:'d| would)\s+(?:guess|estimate)|"
                            r"(?:it|that|they)(?:'s|'re|\s+is|\s+are|\s+was)\s+(?:probably|likely|most likely|possibly|perhaps)|"
                            r"probably|maybe|perhaps|possibly|most likely|"
                            rf"(?:it|that)\s+(?:might|may|could|must)\s+(?:be|have been))\b{_ADVICE}", re.IGNORECASE)


def _contains(haystack: list[str], needle: list[str]) -> bool:
    n = len(needle)
    return n > 0 and any(haystack[i:i + n] == needle for i in range(len(haystack) - n + 1))


def _check_answers(answers) -> list[str]:
    if isinstance(answers, str) or not isinstance(answers, (list, tuple)):
        raise ValueError(f"reference answers must be a list of strings, got {type(answers).__name__}")
    if not all(isinstance(a, str) for a in answers):
        raise ValueError("reference answers must be strings")
    return [a for a in answers if normalize_answer(a)]


_DECIMAL_POINT = re.compile(r"(?<=\d)\.(?=\d)")
_THOUSANDS_GROUPS = re.compile(r"\b\d{1,3}(?:,\d{3})+\b")
_SIGN_BEFORE = re.compile(r"([$£€])\s?(\d[\d.]*)")
_SIGN_WORD = {"$": "dollars", "£": "pounds", "€": "euros"}
_CLOCK_SUFFIX = re.compile(r"(?<=\d)(?=(?:am|pm)\b)")
_MONTH_NAMES = ("january february march april may june july august september october november december").split()
_DAY_MONTH = re.compile(r"\b(\d{1,2}) (?:of )?(" + "|".join(_MONTH_NAMES) + r")\b")
_ORDINAL_SUFFIX = re.compile(r"\b(\d+)(?:st|nd|rd|th)\b")
_SPELLINGS = {"metre": "meter", "metres": "meters", "kilometre": "kilometer", "kilometres": "kilometers",
              "centimetre": "centimeter", "centimetres": "centimeters", "litre": "liter", "litres": "liters",
              "centre": "center", "centres": "centers", "theatre": "theater", "colour": "color", "per cent": "percent"}


def _answer_words(text: str) -> list[str]:
    """SQuAD's normalisation (lower case, no punctuation, no articles), with one way of writing
    each value: a decimal point stays a word of its own ("3.5 km" is not "35 km"), thousands
    separators go ("1,360" is "1360", while "1,3,60" stays three numbers), a currency sign is its
    word ("$1,360" is "1360 dollars"), number words are digits ("three", "two hundred and ten"),
    "9am" is "9 am", "3 May" is "may 3", an ordinal is its number ("3rd" is "3") and British
    spellings are American ("metres"). "one" stays a word ("no one"), and digits stay as written
    ("007", "the 1990s", "MP3")."""
    text = _THOUSANDS_GROUPS.sub(lambda m: m.group(0).replace(",", ""), text)
    text = _SIGN_BEFORE.sub(lambda m: f"{m.group(2)} {_SIGN_WORD[m.group(1)]}", text)
    text = _compound_numbers(text.replace("%", " percent")).lower()
    text = _DECIMAL_POINT.sub(" point ", text.replace("a.m.", "am").replace("p.m.", "pm"))
    text = _CLOCK_SUFFIX.sub(" ", _ORDINAL_SUFFIX.sub(r"\1", text.replace(",", " ")))
    text = _DAY_MONTH.sub(r"\2 \1", text)
    for british, american in _SPELLINGS.items():
        text = re.sub(rf"\b{british}\b", american, text)
    # number words as digits ("three"), but not "one" ("no one", "this one"), and digits as written
    # ("007", "1990s", "mp3" stay themselves)
    return [number_value(word) if word.isalpha() and word != "one" and number_value(word) is not None else word
            for word in normalize_answer(text).split()]


def answer_match(response: str, answers: Sequence[str]) -> float | None:
    """1.0 when some reference answer, SQuAD-normalised (lower case, no punctuation, no articles;
    decimal points kept), occurs as a run of whole words in the normalised response; 0.0 when none
    does; ``None`` without reference answers (an unanswerable question has none)."""
    answers = _check_answers(answers)
    if not answers:
        return None
    text = _answer_words(response)
    return float(any(_contains(text, _answer_words(a)) for a in answers))


def answer_recall(response: str, answers: Sequence[str]) -> float | None:
    """The largest share, over the reference answers, of a reference's normalised words that the
    normalised response holds (each word counted once); ``None`` without references."""
    answers = _check_answers(answers)
    if not answers:
        return None
    have = set(_answer_words(response))
    best = 0.0
    for answer in answers:
        answer_words = _answer_words(answer)
        best = max(best, sum(w in have for w in answer_words) / len(answer_words))
    return best


def abstains(response: str, question: str | None = None) -> bool:
    """Whether the response says that it (or its source) does not tell, in any of the usual
    wordings ("the document doesn't mention ...", "I'm not sure", "there is no information on
    ...", "that isn't specified", "no idea", "hard to say", "it says nothing about ...", "it covers
    when, but not who", "the page only covers weekdays, not Sundays"), rather than asserting an
    answer. A
    negative answer ("the museum is not open on Mondays") is not an abstention: every pattern
    needs a verb of telling or knowing, or a noun of information; and a verb that is one of having
    too ("the fare doesn't include meals", "water damage isn't covered") only where the source is
    what lacks it or what it lacks is information (:func:`_said_of_information`). A hedge followed by an answer
    asserts the answer, in the same sentence ("I'm not sure, but I think it opens at 9", "... but
    it says it was finished in the 1850s") or in a later one that opens with a guess ("I don't
    know. I think it was made out of silver.", "My best estimate would be 28 inches").

    Given the ``question``, a hedge about a side detail after an answer does not count either:
    "Yes, it opens at 10 on Sundays, though the page doesn't say whether lanes can be booked",
    asked whether the pool opens on Sundays, and neither does one before an answer ("The notice
    doesn't give a reason, but it says the run is postponed to 12 May"). It is a side detail when
    an answer to the question stands beside it (a yes or no, or a clause with a number, a day or a
    month that shares a word with the question or gives a value of the kind it asks for:
    :func:`_answers`) and what it says is not told shares no content word (Porter stem) with the
    question, nor the kind of thing it asks for ("any fees" for "how much", unless the answer gives
    a price already) (:func:`_side_detail`)."""
    if not isinstance(response, str):
        raise ValueError(f"expected a string response, got {type(response).__name__}")
    if question is not None and not isinstance(question, str):
        raise ValueError(f"expected the question as a string (or None), got {type(question).__name__}")
    text = response.replace("\u2019", "'")
    parts = sentences(text) or [text]
    asked = _asked(question.replace("\u2019", "'")) if question else None
    hedges = []
    for i, sentence in enumerate(parts):
        hit = _hedge(sentence)
        hedges.append(hit is not None and not (asked and _side_detail(" ".join(parts[:i]), sentence, hit, asked)))
    guesses = [not hedge and _GUESS_OPENING.search(sentence) is not None for sentence, hedge in zip(parts, hedges)]
    return any(hedge and not any(guesses[i + 1:]) for i, hedge in enumerate(hedges))


def _hedge(sentence: str):
    """Where the sentence says it (or its source) does not tell (the first pattern's match), if
    it does and does not go on to an answer; ``None`` otherwise."""
    hit = _not_told(sentence)
    return hit if hit is not None and not _HEDGED_ANSWER.search(sentence, hit.end()) else None


def _not_told(text: str):
    """The first place where the text says it (or its source) does not tell, or ``None``."""
    negated = (m for p in _NEGATED_TELLING for m in p.finditer(text) if _said_of_information(text, m))
    return next(negated, None) or next((m for p in _ABSTAIN for m in [p.search(text)] if m), None)


def _said_of_information(text: str, hit) -> bool:
    """A negated verb of telling that is a verb of having too (include, contain, provide, cover,
    have, show, carry, offer, leave out) is a hedge only when the source is what does not include ("the menu doesn't include prices", "not
    covered in the brochure") or what is not included is information ("it doesn't provide a reason",
    "the exact times aren't included"): "the fare doesn't include meals", "the price doesn't include
    VAT", "water damage isn't covered" and "it doesn't cover that" answer."""
    if not _HAVING.search(hit.group(0)):
        return True
    before, after = text[:hit.start()], text[hit.end():]
    if _SOURCE_SUBJECT.search(before) or _SOURCE_AFTER.search(hit.group(0)) or _SOURCE_AFTER.match(after):
        return True
    if _SOURCE_NAMED.search(before) and (_PRONOUN_SUBJECT.search(before) or _PRONOUN_AFTER.match(after)):
        return True
    return bool(_INFORMATION_OBJECT.match(after) or (_PASSIVE.match(hit.group(0)) and (
        _INFORMATION_SUBJECT.search(before) or _QUESTION_SUBJECT.search(before))))


_OBJECT_END = re.compile(r"[,;:.!?]|\b(?:but|though|although|however)\b", re.IGNORECASE)
_CLAUSE_BREAK = re.compile(r"[,;:.!?]|\b(?:but|though|although|while|and)\b", re.IGNORECASE)
# a yes or no, in so many words or in others ("Sadly not", "Looks like it", "Not as written")
_POLAR_OPENING = (r"^\W*(?:yes|no|yep|yeah|nope|sadly not|unfortunately not|(?:i'm\s+)?afraid not|"
                  r"looks like (?:it|not|so)|seems (?:so|not)|not as (?:written|listed|stated|described))\b")
_POLAR = re.compile(_POLAR_OPENING, re.IGNORECASE)
# an answer clause says something specific: it opens with yes or no, or it holds a number, a day or a month
_SPECIFIC = re.compile(_POLAR_OPENING + r"|\d|\b(?:one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|"
                       r"fifteen|twenty|thirty|forty|fifty|sixty|hundred|thousand|half|quarter|noon|midnight|"
                       r"monday|tuesday|wednesday|thursday|friday|saturday|sunday|january|february|march|april|"
                       r"june|july|august|september|october|november|december)\b", re.IGNORECASE)
_SOURCE_SAYS = re.compile(rf"\b{_SOURCE}\s+(?:\w+\s+){{0,1}}{_TELL}\b", re.IGNORECASE)
_NOT_TOLD = re.compile(rf"\b(?:{_SOURCE}|information|mention|details?|data|anything|answer|sure|whether)\b",
                       re.IGNORECASE)


# What kind of thing a question asks for, and what a hedge says is not told, by its question word or
# its noun: "How much is the club?" and "it doesn't list any fees"; "Why is my pay lower?" and "... so I
# can't work out why your pay has dropped"; "What's the treasurer's name?" and "it doesn't say who".
_KINDS = [(kind, re.compile(rf"\b(?:{words})\b", re.IGNORECASE)) for kind, words in [
    ("?how much", r"how\s+much|prices?|pricing|costs?|fees?|charges?|rates?|tariffs?|fares?"),
    ("?when", r"when|what\s+time|dates?|days?|times?|deadlines?|time\s+limits?"),
    ("?who", r"who|whom|whose|names?"),
    ("?where", r"where|place|location|address|venue|country"),
    ("?how long", r"how\s+long|duration|runtime|run\s+time|length|timescales?|timeframes?|notice\s+period"),
    ("?why", r"why|reasons?|explanation|cause"),
    ("?how many", r"how\s+many|numbers?|count|capacity|quantity"),
]]


# An answer that already gives a value of a kind: a hedge of that kind beside it is about another item ("The
# buffet costs €18 per adult; the menu doesn't mention a price for children")
_VALUES = [(kind, re.compile(pattern, re.IGNORECASE)) for kind, pattern in [
    ("?how much", r"[£$€¥]\s?\d|\d\s*(?:dollars|pounds|euros|pence|cents)\b|\bfree\b"),
    ("?when", r"\b\d{1,2}(?::\d{2})?\s*(?:am|pm|a\.m\.|p\.m\.)|\b\d{1,2}:\d{2}\b|\b(?:monday|tuesday|wednesday|thursday|"
              r"friday|saturday|sunday|january|february|march|april|may|june|july|august|september|october|"
              r"november|december|noon|midnight|today|tomorrow|tonight)\b"),
    ("?how long", r"\b\d+\s*(?:minutes?|mins?|hours?|hrs?|days?|weeks?|months?|years?)\b"),
    ("?how many", r"\b\d+\b|\b(?:one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|twenty|hundred)\b"),
    ("?why", r"\b(?:because|due to|owing to|as a result)\b"),
    ("?who", r"(?-i:\b(?:Dr|Mr|Mrs|Ms|Miss|Prof|Professor|Coach|Captain)\.?\s+[A-Z]|\b[A-Z][a-z]+\s+[A-Z][a-z]+\b)"),
    ("?where", r"\b(?:online|room\s+\w+|street|road|avenue|lane|floor|building|studio\s+\w+)\b"),
]]


def _kinds(text: str, answer: str = "") -> set:
    """The kinds of thing the text asks for or names ("?how much", "?why", ...), less those of which
    the ``answer`` already gives a value."""
    return {kind for kind, words in _KINDS if words.search(text)} - (_values(answer) if answer else set())


def _asked(question: str) -> frozenset:
    """The question's content stems, and the kinds of thing it asks for."""
    return _content_stems(question) | _kinds(question)


def _content_stems(text: str) -> frozenset:
    from spacy.lang.en.stop_words import STOP_WORDS

    return frozenset(porter_stem(w) for w in re.findall(r"[a-z]+", text.lower()) if len(w) > 2 and w not in STOP_WORDS)


def _side_detail(earlier: str, sentence: str, hit, asked: frozenset) -> bool:
    """The hedge ``hit`` of ``sentence`` is about a side detail beside an answer.

    The answer is a clause of three words or more that is no hedge and opens with yes or no or
    holds a number, a day or a month: before the hedge, ended by a clause break ("Yes, it opens at
    10 on Sundays, though the page ..."; a clause that only says what the source covers, "the
    booklet mentions the 1987 regatta, but ...", answers nothing), or after it in the same sentence
    ("The notice doesn't give a reason, but it says the run is postponed to 12 May"). What the
    hedge says is not told (up to its clause's end, in the passive its subject too, the source's own
    name left out, and without the words the answer already uses) must share no content stem with the question (``asked``),
    and so must what every later hedge of the sentence says is not told."""
    before = f"{earlier} {sentence[:hit.start()]}".strip()
    breaks = list(_CLAUSE_BREAK.finditer(before))
    answer_before = before[:breaks[-1].start()] if breaks else ""
    rest = sentence[hit.end():]
    told_text, answer_after = _split_told(rest)
    # "Water damage isn't mentioned either way", "the architect is unknown": what is not told comes first
    if _PASSIVE.match(hit.group(0)) or _UNKNOWN.fullmatch(hit.group(0)):
        told_text = f"{_CLAUSE_BREAK.split(sentence[:hit.start()])[-1]} {told_text}"
    inside = _NONE_GIVEN.match(hit.group(0))
    if inside:  # "No in-person option is listed"
        told_text = f"{inside.group(1)} {told_text}"
    if _not_told(before) is not None:
        return False
    # (a source cited in brackets is no clause of what the source covers: "Online (the letter gives the URL)")
    if _answers(answer_before, asked) and (_POLAR.match(answer_before)
                                           or not _SOURCE_SAYS.search(_BRACKETS.sub(" ", answer_before))):
        answer = answer_before
    elif _answers(answer_after, asked) and _hedge(answer_after) is None:
        answer = answer_after
    else:
        return False
    known = _content_stems(answer)
    # this hedge and every later one of the sentence must be about a side detail: "Open 10 to 5
    # daily, but there's no mention of holiday closures, so I can't confirm Boxing Day" abstains
    while True:
        told = (_content_stems(_NOT_TOLD.sub(" ", told_text)) - known) | _kinds(told_text, answer)
        if not told or told & asked:
            return False
        later = _hedge(rest)
        if later is None:
            return True
        rest = rest[later.end():]
        told_text, _ = _split_told(rest)


_BRACKETS = re.compile(r"\([^()]*\)")
_UNKNOWN = re.compile(r"unknown|unclear|not known|not clear", re.IGNORECASE)
_NONE_GIVEN = re.compile(r"no\s+(.*?)\s+(?:is\s+|are\s+|was\s+|were\s+)?(?:\w+|(?:set|spelled|spelt)\s+out)$",
                         re.IGNORECASE)


def _split_told(rest: str) -> tuple[str, str]:
    """What follows a hedge, split at its clause's end: what it says is not told, and the rest."""
    end = _OBJECT_END.search(rest)
    return (rest[:end.start()], rest[end.end():]) if end else (rest, "")


def _answers(clause: str, asked: frozenset) -> bool:
    """An answer to what was ``asked``: a yes or no ("No.", "Looks like it: ..."), or a clause of three
    words or more that holds a number, a day or a month and is about the question: it shares a content
    word with it, or gives a value of the kind it asks for (a price for "how much", a name for "who").
    Facts the source holds beside the question ("It sets out a 24-month term at £22 a month", asked
    what leaving early costs) answer nothing."""
    if _POLAR.match(clause):
        return True
    if len(re.findall(r"[a-z0-9]+(?:'[a-z]+)?", clause.lower())) < 3 or _SPECIFIC.search(clause) is None:
        return False
    return bool(_content_stems(clause) & asked or _values(clause) & asked)


def _values(clause: str) -> set:
    """The kinds of value the clause gives ("?how much" for "£22", "?who" for "Dr Hughes")."""
    return {kind for kind, value in _VALUES if value.search(clause)}


def response_words(response: str) -> int:
    """The number of words of the response."""
    return len(words(response))


def recited_share(response: str, answers: Sequence[str] | None = None) -> float | None:
    """The share of the response's words after the sentence that answers: the first sentence
    holding a reference answer, or the first sentence when no reference is given or none is
    held. 0.0 for a one-sentence response; ``None`` for an empty one."""
    parts = sentences(response)
    total = sum(len(words(s)) for s in parts)
    if total == 0:
        return None
    answers = _check_answers(answers or [])
    answering = 0
    for i, sentence in enumerate(parts):
        if any(answer_match(sentence, [a]) for a in answers):
            answering = i
            break
    after = sum(len(words(s)) for s in parts[answering + 1:])
    return after / total


def _turn_lists(values, what: str) -> list:
    """``values`` as a list of per-row lists (refusing a single string or a list of strings)."""
    if isinstance(values, str) or values is None:
        raise ValueError(f"{what} must be a list with one list of turns per row, got {type(values).__name__}")
    values = list(values)
    for i, item in enumerate(values):
        if isinstance(item, str) or not isinstance(item, (list, tuple)):
            raise ValueError(f"{what}[{i}] must be a list of turns (oldest first), got {type(item).__name__}")
    return values


def correctness_measures(documents: Sequence[str], histories: Sequence[Sequence[str]], responses: Sequence[str],
                         *, answers: Sequence[Sequence[str] | None] | None = None,
                         answerable: Sequence[bool | None] | None = None, nlp=None, nlp_ner=None) -> list[dict]:
    """The :data:`CORRECTNESS_COLUMNS` of each response.

    ``answers``: per row, the reference answers (``None`` or ``[]`` where there are none);
    ``answerable``: per row, whether the document holds an answer (``None``: unknown). Where a
    row is known to be unanswerable, ``asserts_unanswerable`` is 1.0 unless the response abstains
    or says nothing (no word); elsewhere it is ``None``. Where a row is known to be answerable (``answerable`` true, or
    reference answers given), ``abstains_answerable`` is 1.0 when the response abstains;
    elsewhere ``None``. ``answers_intact`` is 1.0 where ``answer_match`` is and the response
    holds no wrong number or name (``None`` without references). Wrong facts need no reference (see
    :func:`~pmi_decode.metrics.fact_support.wrong_facts`)."""
    documents, responses = text_list(documents, "documents"), text_list(responses, "responses")
    histories = [text_list(h, f"histories[{i}]") for i, h in enumerate(_turn_lists(histories, "histories"))]
    n = len(responses)
    if len(documents) != n or len(histories) != n:
        raise ValueError(f"got {len(documents)} documents, {len(histories)} histories and {n} responses")
    answers = list(answers) if answers is not None else [None] * n
    answerable = list(answerable) if answerable is not None else [None] * n
    if len(answers) != n or len(answerable) != n:
        raise ValueError(f"answers and answerable need one entry per response ({n})")
    for i, (refs, can) in enumerate(zip(answers, answerable)):
        if isinstance(refs, str):
            raise ValueError(f"answers[{i}] must be a list of reference answers (or None), got the string {refs!r}: "
                             "pass one list per response")
        if can is not None and (isinstance(can, (int, float, str)) and not isinstance(can, bool)
                                or can not in (True, False)):  # a numpy bool is taken
            raise ValueError(f"answerable[{i}] must be true, false or None, got {can!r}")
    answerable = [None if can is None else bool(can) for can in answerable]
    nlp = nlp if nlp is not None else load_nlp()
    nlp_ner = nlp_ner if nlp_ner is not None else load_nlp_ner()
    rows = []
    for document, history, response, refs, can in zip(documents, histories, responses, answers, answerable):
        refs = list(refs or [])
        if can is False and refs:
            raise ValueError("a row marked unanswerable has reference answers")
        wrong = wrong_facts(document, history, response, nlp=nlp, nlp_ner=nlp_ner)
        abstained = abstains(response, history[-1] if history else None)
        match = answer_match(response, refs)
        answerable_row = can is True or bool(refs)
        rows.append({
            "answer_match": match,
            "answer_recall": answer_recall(response, refs),
            "answers_intact": None if match is None else float(match == 1.0 and not wrong),
            "abstains": float(abstained),
            # a response without a word (empty, or punctuation alone) asserts nothing
            "asserts_unanswerable": (0.0 if abstained or not words(response) else 1.0) if can is False else None,
            "abstains_answerable": float(abstained) if answerable_row else None,
            "wrong_facts": float(len(wrong)),
            "wrong_numbers": float(sum(u["numeric"] for u in wrong)),
            "wrong_names": float(sum(not u["numeric"] for u in wrong)),
            "recited_share": recited_share(response, refs),
            "response_words": float(response_words(response)),
        })
    return rows
