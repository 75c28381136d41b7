"""ConsisTest (Lotfi et al., GEM 2022): questions about facts a PersonaChat speaker already stated.

Three files, as the benchmark ships them:

* ``persona_qas.json``: ``{persona_fact: [{"q", "a", "source": "pers", "type": "yn"|"wh", "c"}]}``;
* ``history_qas.json``: ``{dialog_id: [{"c", "q", "a", "turn", "source": "hist"|"hist_ext",
  "type", "dialog", "alt_c"}]}``, where ``c`` is the fact as said in the conversation, ``turn``
  the index of the persona speaker's utterance that says it (utterance ``2 * turn + 1``), and
  ``alt_c`` (may be empty) a rewrite of the fact that reads as a statement;
* ``valid.json``: the PersonaChat validation dialogues, ``{dialog_id: {"persona": [...],
  "utterances": [...]}}`` (the other speaker opens; odd utterances are the persona speaker's).
  The original ``personachat_self_original.json`` (``{"valid": [{"personality", "utterances":
  [{"history", "candidates"}]}]}``) is also read; its dialogues are numbered in file order.

``a`` may hold alternatives separated by " | ". A sample is a conversation segment plus the
question, asked by the other speaker to the persona speaker:

* persona questions are asked at the ``start`` of a conversation (no history) and at its
  ``end`` (after the last ``2 * (num_history - 1)`` utterances), as the authors did;
* history questions are asked ``distance`` exchanges after the fact (0: right after it), with
  the last ``2 * num_history`` utterances as the segment; a distance that runs past the end of
  the dialogue makes no sample (counted in the report).

The NLI premise (``fact``) is ``alt_c`` when given, else ``c``. :func:`to_record` turns a
sample into a :class:`~pmi_decode.data.records.DialogueRecord` for decoding, with the persona
and (by default) the conversation segment as the document, the grounding PMI-Decode amplifies.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Sequence

from .records import DialogueRecord, LoadReport, expect, read_json

logger = logging.getLogger(__name__)

__all__ = ["ConsisTestSample", "read_persona_qas", "read_history_qas", "read_dialogues", "build_samples",
           "load_samples", "to_record", "load_consistest", "SOURCES"]

SOURCES = {"pers": "persona", "hist": "history", "hist_ext": "history"}
TYPES = ("yn", "wh")
DOCUMENT_MODES = ("persona+history", "persona")


@dataclass(frozen=True)
class ConsisTestSample:
    id: str
    dialog_id: str
    persona: tuple[str, ...]
    history: tuple[str, ...]   # the conversation segment before the question, oldest first
    question: str
    answer: str                # reference answer, alternatives separated by " | "
    fact: str                  # NLI premise: alt_c when given, else c
    fact_sentence: str         # c
    source: str                # "persona" or "history"
    raw_source: str            # "pers", "hist" or "hist_ext"
    type: str                  # "yn" or "wh"
    distance: int              # exchanges between the fact and the question (persona: 0 at start)
    position: str = ""         # persona questions: "start" or "end"
    turn: int | None = None
    meta: dict = field(default_factory=dict, compare=False)

    def to_dict(self) -> dict:
        return asdict(self)


def _check_qa(qa, where: str, path, *, history: bool) -> None:
    expect(isinstance(qa, dict), path, f"{where}: expected an object with q, a, type, got {type(qa).__name__}")
    needed = ("c", "q", "a", "turn", "type") if history else ("q", "a", "type")
    missing = [k for k in needed if k not in qa]
    expect(not missing, path, f"{where}: missing field(s) {', '.join(missing)}")
    expect(qa["type"] in TYPES, path, f"{where}: type must be 'yn' or 'wh', got {qa['type']!r}")
    for key in ("q", "a") + (("c",) if history else ()):
        expect(isinstance(qa[key], str) and qa[key].strip() != "", path, f"{where}: {key!r} must be a non-empty string")
    source = qa.get("source", "hist" if history else "pers")
    allowed = ("hist", "hist_ext") if history else ("pers",)
    expect(source in allowed, path, f"{where}: source must be one of {allowed}, got {source!r}")
    if history:
        expect(isinstance(qa["turn"], int) and not isinstance(qa["turn"], bool) and qa["turn"] >= 0, path,
               f"{where}: 'turn' must be a non-negative integer, got {qa['turn']!r}")


def _read_qas(path, layout: str, entry: str, *, history: bool) -> dict[str, list[dict]]:
    """A ConsisTest question file: an object of ``entry`` key -> list of questions, each validated
    (a clear error names the entry and the question)."""
    data = read_json(Path(path), layout)
    expect(isinstance(data, dict), path, f"expected an object {{{entry}: [questions]}}")
    for key, qas in data.items():
        expect(isinstance(qas, list), path, f"{entry} {key!r}: expected a list of questions")
        for k, qa in enumerate(qas):
            _check_qa(qa, f"{entry} {key!r}, question {k}", path, history=history)
    return {str(k): v for k, v in data.items()}


def read_persona_qas(path) -> dict[str, list[dict]]:
    """``persona_qas.json``: persona fact -> its questions (validated)."""
    return _read_qas(path, "ConsisTest persona_qas.json: {persona_fact: [{q, a, source, type, c}]}",
                     "persona fact", history=False)


def read_history_qas(path) -> dict[str, list[dict]]:
    """``history_qas.json``: dialogue id -> its questions (validated)."""
    return _read_qas(path, "ConsisTest history_qas.json: {dialog_id: [{c, q, a, turn, source, type, dialog, alt_c}]}",
                     "dialog", history=True)


def read_dialogues(path) -> dict[str, dict]:
    """PersonaChat dialogues as ``{dialog_id: {"persona": [...], "utterances": [...]}}``."""
    data = read_json(Path(path), "PersonaChat valid.json: {dialog_id: {persona, utterances}}")
    if isinstance(data, dict) and isinstance(data.get("valid"), list):  # personachat_self_original.json
        converted = {}
        for i, dialog in enumerate(data["valid"]):
            expect(isinstance(dialog, dict) and "personality" in dialog and dialog.get("utterances"), path,
                   f"valid[{i}]: expected personality and utterances")
            last = dialog["utterances"][-1]
            converted[str(i)] = {"persona": list(dialog["personality"]),
                                 "utterances": list(last["history"]) + [last["candidates"][-1]]}
        data = converted
    expect(isinstance(data, dict), path, "expected an object {dialog_id: {persona, utterances}}")
    for dialog_id, dialog in data.items():
        expect(isinstance(dialog, dict) and isinstance(dialog.get("persona"), list)
               and isinstance(dialog.get("utterances"), list), path,
               f"dialog {dialog_id!r}: expected {{'persona': [...], 'utterances': [...]}}")
        expect(all(isinstance(u, str) for u in dialog["utterances"]), path,
               f"dialog {dialog_id!r}: utterances must be strings")
    return {str(k): v for k, v in data.items()}


def build_samples(dialogues: dict, persona_qas: dict, history_qas: dict, *, num_history: int = 3,
                  distances: Sequence[int] = (0, 2), persona_positions: Sequence[str] = ("start", "end"),
                  report: LoadReport | None = None) -> list[ConsisTestSample]:
    """The benchmark's samples, dialogue by dialogue: persona questions, then history questions."""
    if isinstance(num_history, bool) or not isinstance(num_history, int) or num_history < 1:
        raise ValueError(f"num_history must be an integer >= 1, got {num_history!r}")
    distances = list(distances)
    if any(not isinstance(d, int) or d < 0 or d >= num_history for d in distances):
        raise ValueError(f"distances must be integers in [0, num_history - 1] = [0, {num_history - 1}] so the fact "
                         f"stays inside the {2 * num_history}-utterance history window, got {distances}")
    bad = [p for p in persona_positions if p not in ("start", "end")]
    if bad:
        raise ValueError(f"persona_positions must be 'start' and/or 'end', got {bad}")
    report = report if report is not None else LoadReport(dataset="consistest", split="valid")
    unknown = sorted(set(history_qas) - set(dialogues))
    for dialog_id in unknown:
        if history_qas[dialog_id]:
            report.skip("history_questions_of_unknown_dialog", dialog_id, n=len(history_qas[dialog_id]))
    samples: list[ConsisTestSample] = []
    for dialog_id, dialog in dialogues.items():
        persona = tuple(dialog["persona"])
        utterances = list(dialog["utterances"])
        end_segment = utterances[: len(utterances) - len(utterances) % 2]  # end on the persona speaker
        end_segment = end_segment[len(end_segment) - 2 * (num_history - 1):] if num_history > 1 else []
        for fact in persona:
            if fact not in persona_qas:
                report.missing("persona_fact_without_questions", fact)
                continue
            for k, qa in enumerate(persona_qas[fact]):
                for position in persona_positions:
                    history = () if position == "start" else tuple(end_segment)
                    samples.append(_sample(f"{dialog_id}-p{persona.index(fact)}.{k}-{position}", dialog_id, persona,
                                           history, qa, qa.get("c", fact), "pers", 0, position, None))
        for k, qa in enumerate(history_qas.get(dialog_id, [])):
            where = 2 * qa["turn"] + 1
            if where >= len(utterances):
                report.skip("fact_turn_beyond_dialog", f"{dialog_id}: turn {qa['turn']}")
                continue
            for distance in distances:
                cut = 2 * (qa["turn"] + distance + 1)
                if cut > len(utterances):
                    report.skip("distance_beyond_dialog", f"{dialog_id}: turn {qa['turn']} + {distance}")
                    continue
                history = tuple(utterances[:cut][-2 * num_history:])
                premise = qa.get("alt_c") or qa["c"]
                samples.append(_sample(f"{dialog_id}-h{k}-d{distance}", dialog_id, persona, history, qa, premise,
                                       qa.get("source", "hist"), distance, "", qa["turn"], fact_sentence=qa["c"]))
    report.records = len(samples)
    return samples


def _sample(sample_id, dialog_id, persona, history, qa, premise, raw_source, distance, position, turn,
            fact_sentence=None) -> ConsisTestSample:
    return ConsisTestSample(
        id=sample_id, dialog_id=str(dialog_id), persona=persona, history=history, question=qa["q"].strip(),
        answer=qa["a"].strip(), fact=premise.strip(), fact_sentence=(fact_sentence or premise).strip(),
        source=SOURCES[raw_source], raw_source=raw_source, type=qa["type"], distance=distance, position=position,
        turn=turn,
    )


def load_samples(data_dir=None, *, persona_qas_file="persona_qas.json", history_qas_file="history_qas.json",
                 dialogs_file="valid.json", report: LoadReport | None = None, **options) -> list[ConsisTestSample]:
    """Read the three files from ``data_dir`` and build the samples (``options``: see :func:`build_samples`)."""
    folder = Path(data_dir) if data_dir is not None else Path(".")
    dialogues = read_dialogues(folder / dialogs_file)
    samples = build_samples(dialogues, read_persona_qas(folder / persona_qas_file),
                            read_history_qas(folder / history_qas_file), report=report, **options)
    logger.info("ConsisTest: %d samples from %d dialogues", len(samples), len(dialogues))
    return samples


def to_record(sample: ConsisTestSample, *, document_mode: str = "persona+history") -> DialogueRecord:
    """A decoding record: the persona (and conversation segment) as the document, the question last.

    ``document_mode="persona+history"`` (default) puts the persona and the conversation segment in
    the document and the question alone in the history, so PMI-Decode amplifies both kinds of
    fact; ``"persona"`` keeps the segment in the dialogue history.
    """
    if document_mode not in DOCUMENT_MODES:
        raise ValueError(f"document_mode must be one of {DOCUMENT_MODES}, got {document_mode!r}")
    persona = "Your persona: " + " ".join(s.strip() for s in sample.persona)
    if document_mode == "persona+history":
        lines = [f"{'Them' if i % 2 == (len(sample.history) % 2) else 'You'}: {u.strip()}"
                 for i, u in enumerate(sample.history)]
        document = persona + ("\nConversation so far:\n" + "\n".join(lines) if lines else "")
        history = [sample.question]
    else:
        document, history = persona, [*sample.history, sample.question]
    meta = {k: v for k, v in sample.to_dict().items() if k not in ("id", "persona", "history", "meta")}
    return DialogueRecord(id=sample.id, document=document, history=history, response=sample.answer, meta=meta)


def load_consistest(split: str, data_dir=None, *, report: LoadReport | None = None,
                    document_mode: str = "persona+history", **options) -> list[DialogueRecord]:
    """The :func:`pmi_decode.data.load_dialogues` entry: ConsisTest samples as dialogue records.

    ConsisTest has one set, built on the PersonaChat validation dialogues (``split`` "valid").
    """
    if split not in ("valid", "validation"):
        raise ValueError(f"ConsisTest has a single split built on PersonaChat's validation dialogues ('valid'), "
                         f"got {split!r}")
    samples = load_samples(data_dir, report=report, **options)
    return [to_record(s, document_mode=document_mode) for s in samples]
