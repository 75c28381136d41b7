"""Topical-Chat (Gopalakrishnan et al., 2019) from a folder laid out like its repository.

``data_dir`` holds ``conversations/{split}.json``, ``reading_sets/post-build/{split}.json`` (built
with the data set's own script) or ``reading_sets/pre-build/{split}.json``, and ``wiki.json`` at
the root or at ``src/wiki/wiki.json``. With a post-build reading set every knowledge piece is a
text. Offline, with only the pre-build one, wiki lead sections are resolved through ``wiki.json``;
fun facts (Reddit ids) and article sections (fetched by the build script) cannot be, and are
counted in the report under ``unresolved``.

Following the PMI-Decode paper: the "rare" splits by default (``validation`` means
``valid_rare``); every turn is a response whose document is the concatenation of the texts its
``knowledge_source`` names (the responding agent's own factual sections ``FS1``-``FS3``: wiki
lead section then fun facts; article sections ``AS1``-``AS4``); turns tagged ``Personal
Knowledge`` are skipped; the first turn of a conversation has no history and is skipped too
(the record type needs the turn being answered).
"""

from __future__ import annotations

import re
from pathlib import Path

from .records import DialogueRecord, LoadReport, expect, read_json

PERSONAL = "Personal Knowledge"
LEAD_KEYS = ("shortened_wiki_lead_section", "summarized_wiki_lead_section")
FILE_NAMES = ("train", "valid_rare", "valid_freq", "test_rare", "test_freq")


def split_file_name(split: str, rare: bool = True) -> str:
    """``validation`` -> ``valid_rare`` (``valid_freq`` when ``rare=False``); file names pass through."""
    if split in FILE_NAMES:
        return split
    kind = "rare" if rare else "freq"
    names = {"train": "train", "validation": f"valid_{kind}", "valid": f"valid_{kind}", "dev": f"valid_{kind}",
             "test": f"test_{kind}"}
    if split not in names:
        raise ValueError(f"topicalchat split must be one of train, validation, test or a file name "
                         f"{FILE_NAMES}, got {split!r}")
    return names[split]


def _wiki_path(root: Path) -> Path | None:
    for candidate in (root / "wiki.json", root / "src" / "wiki" / "wiki.json"):
        if candidate.is_file():
            return candidate
    return None


def read_wiki(path: Path) -> dict:
    """``{section_kind: {id: text}}`` from ``wiki.json`` (which maps texts to ids)."""
    data = read_json(path, 'Topical-Chat wiki.json {"shortened_wiki_lead_section": {text: id}, ...}')
    expect(isinstance(data, dict) and any(k in data for k in LEAD_KEYS), path,
           f"expected an object with {' or '.join(LEAD_KEYS)}")
    return {kind: {int(i): text for text, i in data.get(kind, {}).items()} for kind in LEAD_KEYS}


class _Knowledge:
    """Resolves a turn's knowledge sources to texts from a post-build or pre-build reading set."""

    def __init__(self, reading_sets: dict, prebuilt: bool, wiki: dict | None, report: LoadReport, path: Path):
        self.sets, self.pre, self.wiki, self.report, self.path = reading_sets, prebuilt, wiki, report, path

    def texts(self, conv_id: str, agent: str, source: str) -> list[str]:
        entry = self.sets.get(conv_id)
        if entry is None:
            self.report.missing("reading_set", conv_id)
            return []
        expect(isinstance(entry, dict) and all(isinstance(entry.get(k) or {}, dict) for k in (agent, "article")),
               self.path, f'reading set "{conv_id}": expected an object whose "{agent}" and "article" are objects')
        if re.fullmatch(r"FS\d", source):
            section = (entry.get(agent) or {}).get(source)
            if not isinstance(section, dict):
                self.report.missing("factual_section", f"{conv_id}/{agent}/{source}")
                return []
            return self._lead(section, conv_id) + self._fun_facts(section, conv_id)
        if re.fullmatch(r"AS\d", source):
            text = (entry.get("article") or {}).get(source)
            if not isinstance(text, str) or not text.strip():
                self.report.missing("article_section", f"{conv_id}/{source}")
                return []
            return [text]
        self.report.missing("unknown_source", f"{conv_id}: {source!r}")
        return []

    def _lead(self, section: dict, conv_id: str) -> list[str]:
        for kind in LEAD_KEYS:
            if kind not in section:
                continue
            value = section[kind]
            if isinstance(value, str):
                return [value]
            if self.wiki is not None and isinstance(value, int) and value in self.wiki[kind]:
                return [self.wiki[kind][value]]
            self.report.missing("wiki_lead_section", f"{conv_id}: {kind} {value}")
        return []

    def _fun_facts(self, section: dict, conv_id: str) -> list[str]:
        facts = section.get("fun_facts") or []
        if self.pre:  # Reddit thread ids, only the build script can fetch their texts
            if facts:
                self.report.missing("fun_fact", conv_id, n=len(facts))
            return []
        return [f for f in facts if isinstance(f, str) and f.strip()]


def load_topicalchat(split: str, data_dir=None, *, report: LoadReport, rare: bool = True,
                     skip_personal_knowledge: bool = True, reading_set: str = "auto"):
    if data_dir is None:
        raise ValueError("topicalchat needs data_dir= (a folder with conversations/ and reading_sets/)")
    if reading_set not in ("auto", "post-build", "pre-build"):
        raise ValueError(f"reading_set must be 'auto', 'post-build' or 'pre-build', got {reading_set!r}")
    root = Path(data_dir)
    name = split_file_name(split, rare)
    conv_path = root / "conversations" / f"{name}.json"
    post, pre = root / "reading_sets" / "post-build" / f"{name}.json", root / "reading_sets" / "pre-build" / f"{name}.json"
    if reading_set == "post-build" or (reading_set == "auto" and post.is_file()):
        sets_path, prebuilt = post, False
    else:
        sets_path, prebuilt = pre, True
    conversations = read_json(conv_path, "Topical-Chat conversations {conv_id: {content: [...]}}")
    reading_sets = read_json(sets_path, "Topical-Chat reading sets {conv_id: {agent_1, agent_2, ...}}")
    expect(isinstance(conversations, dict), conv_path, "expected an object mapping conversation ids to conversations")
    expect(isinstance(reading_sets, dict), sets_path, "expected an object mapping conversation ids to reading sets")
    wiki = None
    if prebuilt:
        wiki_path = _wiki_path(root)
        if wiki_path is None:
            report.notes.append(f"no wiki.json under {root} (or src/wiki/): wiki lead sections stay unresolved")
        else:
            wiki = read_wiki(wiki_path)
        report.notes.append(f"pre-build reading set {sets_path}: fun facts and article sections cannot be resolved offline")
    knowledge = _Knowledge(reading_sets, prebuilt, wiki, report, sets_path)
    records = []
    for conv_id, conv in conversations.items():
        expect(isinstance(conv, dict) and isinstance(conv.get("content"), list), conv_path,
               f'conversation "{conv_id}" has no "content" list')
        turns = conv["content"]
        for i, turn in enumerate(turns):
            expect(isinstance(turn, dict) and isinstance(turn.get("message"), str) and turn.get("agent"), conv_path,
                   f'conversation "{conv_id}" turn {i}: needs "message" and "agent"')
            where = f"{conv_id} turn {i}"
            sources = list(turn.get("knowledge_source") or [])
            if i == 0:
                report.skip("no_history", where)
                continue
            if turns[i - 1].get("agent") == turn["agent"]:
                report.skip("same_speaker_as_previous", where)
                continue
            if skip_personal_knowledge and PERSONAL in sources:
                report.skip("personal_knowledge", where)
                continue
            sources = [s for s in sources if s != PERSONAL]
            if not sources:
                report.skip("no_knowledge_source", where)
                continue
            pieces = [t for s in sources for t in knowledge.texts(conv_id, turn["agent"], s)]
            pieces = [" ".join(p.split()) for p in dict.fromkeys(pieces)]
            if not pieces:
                report.skip("no_resolved_knowledge", where)
                continue
            history = turns[:i]
            records.append(DialogueRecord(
                id=f"{conv_id}_{i}",
                document=" ".join(pieces),
                history=[t["message"].strip() for t in history],
                response=turn["message"].strip(),
                meta={"speakers": [t["agent"] for t in history], "agent": turn["agent"],
                      "knowledge_source": sources, "conversation_id": conv_id, "turn": i,
                      "config": conv.get("config")},
            ))
    return records
