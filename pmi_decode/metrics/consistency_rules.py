"""The rule half of the ConsisTest hybrid scorer: text normalisation, yes/no short answers, keywords.

Pure string functions, no models, so every rule can be tested case by case and runs offline.
:mod:`pmi_decode.metrics.consistency` combines them with NLI.

Reading of the paper (Lotfi et al., GEM 2022), written down where it had to be made precise:

* Text is lower-cased, curly quotes straightened, split contractions rejoined ("do n't" ->
  "don't"), a few apostrophe-less spellings repaired ("dont", "im", "cant") and number words
  turned into digits ("twenty one" -> "21", "a hundred" -> "100"), in responses and references
  alike, so "2 cats" matches "two cats".
* A yes/no answer may open with a yes word (yes, yeah, yep, yup, sure, of course, ...) or a no
  word (no, nope, nah, not really, never, ...; "of course not", "definitely not" are no words;
  "no one" and "no matter" are not). Fillers before it ("well,", "oh,", "haha") are skipped.
* A short answer is the question's subject and auxiliary turned round: "do you" -> "i do" /
  "i don't" / "i do not"; "are you" -> "i am" / "i'm" / "i'm not"; "have you" -> "i have" /
  "i've" / "i haven't"; "can you" -> "i can" / "i can't" / "i cannot"; "is your mom" -> "he/she/
  it/they is/are" (we cannot know the gender, so any third-person pronoun counts, the verb agreeing); "are there" ->
  "there are". It counts only when it stands alone: followed by the end, punctuation or a
  connective (but, and, so, too, though, ...). "I do like it" is a long answer, left to NLI.
* Keywords of a WH answer: its word tokens minus the articles a, an, the; recall is the share of
  the answer's distinct keywords found among the response's tokens; with alternatives
  ("girl | female") the best alternative counts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# ------------------------------------------------------------------------------------ normalisation

_UNITS = {"zero": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
          "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14, "fifteen": 15,
          "sixteen": 16, "seventeen": 17, "eighteen": 18, "nineteen": 19}
_TENS = {"twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80,
         "ninety": 90}
_SCALES = {"hundred": 100, "thousand": 1000, "million": 1_000_000, "billion": 1_000_000_000}
# "one" is a pronoun after these ("no one", "the red one", "every one of them"), not a number.
_ONE_IS_PRONOUN_AFTER = {"no", "any", "some", "every", "the", "this", "that", "which", "each", "another", "other",
                         "someone", "red", "blue", "new", "old", "little", "big", "last", "only", "favorite",
                         "favourite", "right", "wrong", "good", "bad", "same", "a"}
_APOSTROPHELESS = {"dont": "don't", "doesnt": "doesn't", "didnt": "didn't", "cant": "can't", "im": "i'm",
                   "ive": "i've", "isnt": "isn't", "arent": "aren't", "wasnt": "wasn't", "werent": "weren't",
                   "havent": "haven't", "hasnt": "hasn't", "couldnt": "couldn't", "wouldnt": "wouldn't",
                   "shouldnt": "shouldn't", "wont": "won't", "youre": "you're", "theyre": "they're"}
ARTICLES = frozenset({"a", "an", "the"})


def words_to_numbers(text: str) -> str:
    """Replace runs of English number words by digits: "twenty-one" -> "21", "a hundred" -> "100"."""
    text = _HYPHENATED.sub(r"\1 \2", text)
    chunks = re.findall(r"[a-z]+|[^a-z]+", text)  # words, and everything between them
    out: list[str] = []
    i = 0
    while i < len(chunks):
        value, end = _number_run(chunks, i, out)
        if value is None:
            out.append(chunks[i])
            i += 1
        else:
            out.append(str(value))
            i = end
    return "".join(out)


_HYPHENATED = re.compile(r"\b(" + "|".join(_TENS) + r")-(one|two|three|four|five|six|seven|eight|nine)\b")


def _is_number_word(chunk: str) -> bool:
    return chunk in _UNITS or chunk in _TENS or chunk in _SCALES


def _previous_word(out: list[str]) -> str:
    for chunk in reversed(out):
        if chunk.strip():
            return chunk if chunk.isalpha() else ""
    return ""


def _number_run(chunks: list[str], start: int, before: list[str]):
    """The value of the number-word run starting at ``chunks[start]`` and the index after it."""
    first = chunks[start]
    if first == "a":
        if not (start + 2 < len(chunks) and chunks[start + 1] == " " and chunks[start + 2] in _SCALES):
            return None, start
    elif not _is_number_word(first) or first in _SCALES:
        return None, start
    elif first == "one" and _previous_word(before) in _ONE_IS_PRONOUN_AFTER:
        return None, start
    total, current, i, end = 0, 0, start, start
    while i < len(chunks):
        chunk = chunks[i]
        if chunk == "a" and i == start:
            current = 1
        elif chunk in _UNITS or chunk in _TENS:
            if end > start and current % 100 != 0 and (current % 10 != 0 or chunk in _TENS or _UNITS.get(chunk, 10) >= 10):
                break  # "two three" or "twenty thirty": two numbers, not one
            current += _UNITS.get(chunk, 0) + _TENS.get(chunk, 0)
        elif chunk == "hundred":
            current = max(current, 1) * 100
        elif chunk in _SCALES:
            total, current = total + max(current, 1) * _SCALES[chunk], 0
        elif chunk == "and" and end > start and (current >= 100 or total) and i + 2 < len(chunks) \
                and _is_number_word(chunks[i + 2]):
            i += 1
            continue
        elif chunk == " " and i + 1 < len(chunks):
            i += 1
            continue
        else:
            break
        i = end = i + 1
    if end == start or (first == "a" and end <= start + 1):
        return None, start
    return total + current, end


def normalize(text: str) -> str:
    """Lower case, straight quotes, rejoined contractions, repaired spellings, number words as digits."""
    text = text.lower().replace("\u2019", "'").replace("\u2018", "'").replace("`", "'")
    text = re.sub(r"\s+'\s*(m|re|s|ve|ll|d)\b", r"'\1", text)       # "i 'm" -> "i'm"
    text = re.sub(r"(\w)\s+n\s*'\s*t\b", r"\1n't", text)              # "do n't" -> "don't"
    text = re.sub(r"(\w)\s*'\s+(m|re|s|ve|ll|d|t)\b", r"\1'\2", text)   # "i' m" -> "i'm"
    text = re.sub(r"\b(" + "|".join(_APOSTROPHELESS) + r")\b", lambda m: _APOSTROPHELESS[m.group(1)], text)
    text = re.sub(r"\s+([,.!?;:])", r"\1", text)                       # "yes , i do ." -> "yes, i do."
    text = words_to_numbers(text)
    text = _DIGIT_SCALE.sub(_scaled, text)  # "45 million" like "forty five million" -> "45000000"
    return " ".join(text.split())


_DIGIT_SCALE = re.compile(r"\b(\d+(?:\.\d+)?) (" + "|".join(_SCALES) + r")\b")


def _scaled(match) -> str:
    value = float(match.group(1)) * _SCALES[match.group(2)]
    return str(int(value)) if value == int(value) else str(value)


def keywords(text: str) -> list[str]:
    """Word tokens of normalised text, articles dropped (order kept, duplicates kept)."""
    return [t for t in re.findall(r"[a-z0-9]+(?:'[a-z]+)?", normalize(text)) if t not in ARTICLES]


def keyword_recall(answer: str, response: str) -> tuple[float, list[str], list[str]]:
    """Share of the answer's distinct keywords found in the response, with the found and missing ones."""
    gold = list(dict.fromkeys(keywords(answer)))
    have = set(keywords(response))
    # A contraction in the response covers its stem ("i've" covers "i"); compare both ways.
    have |= {t.split("'")[0] for t in have if "'" in t}
    found = [g for g in gold if g in have or g.split("'")[0] in have]
    missing = [g for g in gold if g not in found]
    return (len(found) / len(gold) if gold else 0.0), found, missing


_QUESTION_WORDS = ("who", "what", "when", "where", "why", "which", "how", "do", "does", "did", "are", "is", "was",
                   "were", "have", "has", "can")
_QUESTION_START = _QUESTION_WORDS + ("could", "will", "would", "should", "what's", "wbu", "and you", "you?")
# Sentence ends, and a comma followed by a question word ("i have two, do you?").
_CLAUSES = re.compile(r"(?<=[.!?;])\s+|,\s+(?=(?:" + "|".join(_QUESTION_WORDS) + r")\b)")


def strip_counter_question(response: str) -> str:
    """The response without a trailing question back to the user ("I have two. Do you have pets?")."""
    parts = [p for p in _CLAUSES.split(response.strip()) if p.strip()]
    while len(parts) > 1 and _is_question(parts[-1]):
        parts.pop()
    return " ".join(parts).strip()


def _is_question(sentence: str) -> bool:
    s = sentence.strip().lower()
    return s.endswith("?") or s.startswith(_QUESTION_START)


# ------------------------------------------------------------------------------------ yes / no rules

YES_WORDS = ("no doubt", "of course", "yes", "yeah", "yep", "yup", "yea", "yah", "sure", "absolutely", "definitely", "certainly",
             "indeed", "correct", "right", "totally")
NO_WORDS = ("not really", "not at all", "no way", "nope", "nah", "no", "never", "not")
_NOT_A_NO = ("no one", "no-one", "no matter", "no problem")  # "no doubt" is a yes word
_FILLERS = ("well", "oh", "um", "uh", "umm", "hmm", "haha", "hah", "lol", "ah", "wow", "hey", "hi", "ha", "ahh", "ooh")
_CONNECTIVES = ("but", "and", "so", "too", "though", "actually", "indeed", "lol", "haha", "also", "as well", "really",
                "i think", "sadly", "unfortunately", "luckily", "thankfully", "thanks", "sir", "maam", "ma'am")

_NEGATED = {"do": ["don't"], "does": ["doesn't"], "did": ["didn't"], "is": ["isn't"], "are": ["aren't"],
            "was": ["wasn't"], "were": ["weren't"], "have": ["haven't"], "has": ["hasn't"], "had": ["hadn't"],
            "can": ["can't", "cannot"], "could": ["couldn't"], "will": ["won't"], "would": ["wouldn't"],
            "should": ["shouldn't"], "shall": ["shan't"], "must": ["mustn't"], "might": ["mightn't"], "may": [],
            "am": []}
AUXILIARIES = frozenset(_NEGATED)
_CONTRACTED = {"am": "'m", "are": "'re", "is": "'s", "has": "'s", "have": "'ve", "will": "'ll", "would": "'d",
               "had": "'d"}
_FIRST_PERSON = {"are": "am", "were": "was", "is": "am"}
_AGREEMENT = {"is": "are", "are": "is", "was": "were", "were": "was", "does": "do", "do": "does", "has": "have",
              "have": "has"}
_SINGULAR = {"is", "was", "does", "has"}
_YOU = {"you", "u", "ya", "yo", "youre", "you're"}
_PRONOUNS = {"it", "they", "he", "she", "there", "we", "this", "that"}
_QUESTION_FILLERS = ("so", "and", "but", "well", "hey", "oh", "ok", "okay", "also", "then", "really", "wow")


#: The auxiliaries a question may have dropped before its subject ("you married?" = "are you
#: married?"), for "you" (True) and for a third-person pronoun (False).
_DROPPED_AUXILIARIES = {True: ("are", "do", "did", "have"), False: ("is", "does", "did", "has")}


@dataclass(frozen=True)
class ShortAnswers:
    """The short answers a yes/no question allows: ``positive`` and ``negative`` forms (normalised)."""

    auxiliary: str
    subject: str
    positive: tuple[str, ...]
    negative: tuple[str, ...]


def short_answers(question: str) -> ShortAnswers | None:
    """The short answers to a yes/no question, from its auxiliary and subject. A question that
    drops its auxiliary after a subject pronoun ("you married?", "you like dogs?", "she got a
    job?") allows the short answers of every auxiliary it could have dropped (be, do, did, have).
    None when there is neither ("ever been to spain?", "any pets?")."""
    words = re.findall(r"[a-z]+(?:'[a-z]+)?", normalize(question))
    while words and words[0] in _QUESTION_FILLERS:
        words = words[1:]
    if len(words) >= 2 and words[0] not in AUXILIARIES and (words[0] in _YOU or words[0] in _PRONOUNS - {"there"}):
        forms = [short_answers(" ".join([aux, *words])) for aux in _DROPPED_AUXILIARIES[words[0] in _YOU]]
        return ShortAnswers("", forms[0].subject, tuple(dict.fromkeys(f for s in forms for f in s.positive)),
                            tuple(dict.fromkeys(f for s in forms for f in s.negative)))
    if len(words) < 2 or words[0] not in AUXILIARIES:
        return None
    aux, subject = words[0], words[1]
    if subject in _YOU:
        pairs = [("i", _FIRST_PERSON.get(aux, aux))]
        who = "i"
    elif subject in _PRONOUNS:
        who = {"this": "it", "that": "it", "we": "we"}.get(subject, subject)
        pairs = [(who, aux)] + ([(who, _AGREEMENT[aux])] if aux in _AGREEMENT and who == "there" else [])
    else:  # "your mom", "the family", "rob": any third-person pronoun, verb agreeing either way
        who = "third person"
        singular = aux if aux in _SINGULAR or aux not in _AGREEMENT else _AGREEMENT[aux]
        plural = _AGREEMENT[singular] if singular in _AGREEMENT else aux
        pairs = [(p, singular) for p in ("he", "she", "it")] + [("they", plural)]
    positive, negative = [], []
    for pronoun, verb in pairs:
        positive.append(f"{pronoun} {verb}")
        negative.append(f"{pronoun} {verb} not")
        negative += [f"{pronoun} {neg}" for neg in _NEGATED.get(verb, [])]
        if verb in _CONTRACTED and not (pronoun == "there" and verb in ("are", "have")):
            contracted = f"{pronoun}{_CONTRACTED[verb]}"
            positive.append(contracted)
            negative.append(f"{contracted} not")
    return ShortAnswers(aux, who, tuple(dict.fromkeys(positive)), tuple(dict.fromkeys(negative)))


def _strip_fillers(text: str) -> str:
    changed = True
    while changed:
        changed = False
        for filler in _FILLERS:
            match = re.match(rf"{re.escape(filler)}(?:[\s,.!]+|$)", text)
            if match and text[match.end():].strip():
                text, changed = text[match.end():].lstrip(), True
    return text


def _opens_with(text: str, phrase: str, *, connectives: bool) -> str | None:
    """The rest of ``text`` when it opens with ``phrase`` standing alone, else None."""
    if not text.startswith(phrase):
        return None
    rest = text[len(phrase):]
    if not rest or rest[0] in ",.!?;:)":
        return rest.lstrip(",.!?;:) ")
    if rest[0] == " ":
        tail = rest.lstrip()
        if not connectives:
            return tail
        for word in _CONNECTIVES:
            if tail.startswith(word) and (len(tail) == len(word) or not tail[len(word)].isalnum()):
                return tail
    return None


def yes_no_word(response: str) -> tuple[str | None, str | None, str]:
    """``(polarity, word, rest)``: whether the (normalised) response opens with a yes or no word."""
    text = _strip_fillers(response)
    if text.startswith(_NOT_A_NO):
        return None, None, text
    for word in YES_WORDS:
        rest = _opens_with(text, word, connectives=False)
        if rest is None:
            continue
        if rest.startswith("not") and (len(rest) == 3 or not rest[3].isalnum()):  # "of course not", "sure not"
            return "no", f"{word} not", rest[3:].lstrip(",.!?;: ")
        return "yes", word, rest
    for word in NO_WORDS:
        rest = _opens_with(text, word, connectives=False)
        if rest is None:
            continue
        if word == "not" and not (rest == "" or text[3:4] in ",.!"):
            return None, None, text  # "not" opening a longer sentence is not an answer word
        return "no", word, rest
    return None, None, text


def short_answer_polarity(response: str, forms: ShortAnswers) -> tuple[str | None, str | None]:
    """``(polarity, form)``: whether the (normalised) response opens with one of the short answers."""
    text = _strip_fillers(response)
    # Negative forms first: "i do not" must not read as "i do".
    for polarity, candidates in (("no", forms.negative), ("yes", forms.positive)):
        for form in sorted(candidates, key=len, reverse=True):
            if _opens_with(text, form, connectives=True) is not None:
                return polarity, form
    return None, None


def expected_polarity(answer: str) -> str:
    """"no" when an alternative of the reference answer is "no" (or opens with it), else "yes";
    without a yes or no alternative, "no" when the first alternative is negated."""
    alternatives = [normalize(a).strip(" .!") for a in str(answer).split("|") if a.strip()]
    if any(a == "no" or a.startswith(("no,", "no ")) for a in alternatives):
        return "no"
    if any(a == "yes" or a.startswith(("yes,", "yes ")) for a in alternatives):
        return "yes"
    first = alternatives[0] if alternatives else ""
    return "no" if re.search(r"\b(not|never|no)\b|n't\b|cannot", first) else "yes"
