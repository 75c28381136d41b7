"""MultiDoc2Dial (Feng et al., 2021) from its official v1.0 JSON files.

Files in ``data_dir``: ``multidoc2dial_doc.json`` and ``multidoc2dial_dial_{split}.json``.
Following the PMI-Decode paper, only agent turns are modelled; the document of an agent turn is
the text of the spans its references name (``text_sp``, in span order); the history is every
turn before it. Consecutive turns of one speaker are merged into one turn (utterances joined
with a space, references pooled) so the history alternates user/agent and ends on the user.
Agent turns whose references name a document or span missing from the document file are
skipped and counted in the report, never a crash.
"""

from __future__ import annotations

from pathlib import Path

from .records import DialogueRecord, LoadReport, expect, read_json

SPLITS = {"train": "train", "validation": "validation", "valid": "validation", "dev": "validation", "test": "test"}


def _files(data_dir, split, dial_file=None, doc_file=None) -> tuple[Path, Path]:
    if split not in SPLITS and dial_file is None:
        raise ValueError(f"multidoc2dial split must be one of {sorted(set(SPLITS.values()))}, got {split!r}")
    root = Path(data_dir) if data_dir is not None else None
    if root is None and (dial_file is None or doc_file is None):
        raise ValueError("multidoc2dial needs data_dir= (the folder with multidoc2dial_doc.json and "
                         "multidoc2dial_dial_{split}.json)")
    dial = Path(dial_file) if dial_file else root / f"multidoc2dial_dial_{SPLITS[split]}.json"
    doc = Path(doc_file) if doc_file else root / "multidoc2dial_doc.json"
    return dial, doc


def read_documents(path: Path) -> dict:
    """``{doc_id: {id_sp: span}}`` from ``multidoc2dial_doc.json``."""
    data = read_json(path, 'MultiDoc2Dial documents {"doc_data": {domain: {doc_id: {...}}}}')
    expect(isinstance(data, dict) and isinstance(data.get("doc_data"), dict), path,
           'expected a top-level object with "doc_data" (MultiDoc2Dial document file)')
    docs = {}
    for domain, by_id in data["doc_data"].items():
        expect(isinstance(by_id, dict), path, f'doc_data["{domain}"] must map doc ids to documents')
        for doc_id, doc in by_id.items():
            expect(isinstance(doc, dict) and isinstance(doc.get("spans"), dict), path,
                   f'document "{doc_id}" has no "spans" object')
            bad = [sp for sp, span in doc["spans"].items()
                   if not isinstance(span, dict) or not isinstance(span.get("text_sp"), str)]
            expect(not bad, path, f'document "{doc_id}": span {bad[:1]} has no "text_sp" text')
            docs[doc_id] = doc["spans"]
    return docs


def _merge_turns(turns: list[dict], path: Path, dial_id: str) -> tuple[list[dict], int]:
    merged, merges = [], 0
    for i, turn in enumerate(turns):
        expect(isinstance(turn, dict) and turn.get("role") in ("user", "agent") and isinstance(turn.get("utterance"), str),
               path, f'dialogue "{dial_id}" turn {i}: needs "role" (user|agent) and "utterance"')
        refs = turn.get("references") or []
        expect(isinstance(refs, list) and all(isinstance(r, dict) for r in refs), path,
               f'dialogue "{dial_id}" turn {i}: "references" must be a list of objects')
        if merged and merged[-1]["role"] == turn["role"]:
            last = merged[-1]
            last["utterance"] = f'{last["utterance"].strip()} {turn["utterance"].strip()}'
            last["references"] = last["references"] + list(refs)
            last["turn_ids"].append(turn.get("turn_id"))
            merges += 1
        else:
            merged.append({"role": turn["role"], "utterance": turn["utterance"], "references": list(refs),
                           "turn_ids": [turn.get("turn_id")], "da": turn.get("da")})
    return merged, merges


def _document(refs: list[dict], docs: dict, report: LoadReport, where: str) -> str | None:
    """Text of the referenced spans in span order, or None when any reference is missing."""
    spans, ok = [], True
    for ref in refs:
        doc_id, sp = ref.get("doc_id"), str(ref.get("id_sp"))
        if doc_id not in docs:
            report.missing("doc_id", doc_id)
            ok = False
        elif sp not in docs[doc_id]:
            report.missing("span", f"{doc_id}#{sp} ({where})")
            ok = False
        else:
            spans.append((doc_id, sp))
    if not ok or not spans:
        return None
    doc_order = list(dict.fromkeys(d for d, _ in spans))
    ordered = sorted(set(spans), key=lambda s: (doc_order.index(s[0]), _span_key(docs[s[0]][s[1]], s[1])))
    return " ".join(" ".join(docs[d][s]["text_sp"].split()) for d, s in ordered)


def _span_key(span: dict, sp: str):
    start = span.get("start_sp")
    return (start if isinstance(start, int) else int(sp) if sp.isdigit() else 0, sp)


def load_multidoc2dial(split: str, data_dir=None, *, report: LoadReport, dial_file=None, doc_file=None):
    dial_path, doc_path = _files(data_dir, split, dial_file, doc_file)
    docs = read_documents(doc_path)
    data = read_json(dial_path, 'MultiDoc2Dial dialogues {"dial_data": {domain: [dialogue, ...]}}')
    expect(isinstance(data, dict) and isinstance(data.get("dial_data"), dict), dial_path,
           'expected a top-level object with "dial_data" (MultiDoc2Dial dialogue file)')
    records = []
    for domain, dialogues in data["dial_data"].items():
        expect(isinstance(dialogues, list), dial_path, f'dial_data["{domain}"] must be a list of dialogues')
        for n, dialogue in enumerate(dialogues):
            expect(isinstance(dialogue, dict) and isinstance(dialogue.get("turns"), list), dial_path,
                   f'dial_data["{domain}"][{n}] has no "turns" list')
            dial_id = str(dialogue.get("dial_id", f"{domain}-{n}"))
            turns, merges = _merge_turns(dialogue["turns"], dial_path, dial_id)
            if merges:
                report.merged_turns += merges
                report.notes.append(f"{dial_id}: merged {merges} consecutive same-speaker turn(s)")
            for i, turn in enumerate(turns):
                if turn["role"] != "agent":
                    continue
                where = f"{dial_id} turn {turn['turn_ids'][0]}"
                if i == 0:
                    report.skip("no_history", where)
                    continue
                if not turn["references"]:
                    report.skip("no_references", where)
                    continue
                document = _document(turn["references"], docs, report, where)
                if document is None:
                    report.skip("missing_document", where)
                    continue
                history = turns[:i]
                records.append(DialogueRecord(
                    id=f"{dial_id}_{turn['turn_ids'][0]}",
                    document=document,
                    history=[t["utterance"].strip() for t in history],
                    response=turn["utterance"].strip(),
                    meta={"speakers": [t["role"] for t in history], "domain": domain, "dial_id": dial_id,
                          "turn_ids": turn["turn_ids"], "da": turn["da"],
                          "doc_ids": list(dict.fromkeys(r["doc_id"] for r in turn["references"]))},
                ))
    return records
