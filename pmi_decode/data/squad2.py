"""SQuAD 2.0 (Rajpurkar et al., 2018) as one-turn grounded dialogues: does the response answer
the question from the document, with its facts intact, or say the document does not tell?

Each question is a record: ``document`` = its paragraph, ``history`` = [the question],
``response`` = the first reference answer ("" for a question the paragraph cannot answer), and
``meta["answers"]`` (every distinct reference answer) and ``meta["answerable"]``. Reads the
official JSON files as they are (``dev-v2.0.json``, ``train-v2.0.json``, or any file of that
format given as ``file=``).
"""

from __future__ import annotations

from pathlib import Path

from .records import DialogueRecord, LoadReport, read_json

OFFICIAL_FILES = {"dev": "dev-v2.0.json", "validation": "dev-v2.0.json", "train": "train-v2.0.json"}


def load_squad2(split: str, data_dir=None, *, report: LoadReport, file: str | None = None) -> list[DialogueRecord]:
    """Records of ``split`` (``dev``/``validation`` or ``train``) from ``data_dir``; ``file`` names
    another file of the official format inside ``data_dir`` (or a path)."""
    if data_dir is None and file is None:
        raise ValueError("squad2: pass data_dir, the folder of the official SQuAD 2.0 JSON files")
    if file is None and split not in OFFICIAL_FILES:
        raise ValueError(f"squad2: unknown split {split!r}; choose one of {sorted(OFFICIAL_FILES)} or pass file=")
    path = Path(file) if file is not None and (data_dir is None or Path(file).is_absolute()) else \
        Path(data_dir) / (file or OFFICIAL_FILES[split])
    data = read_json(path, "squad2")
    if not isinstance(data, dict) or not isinstance(data.get("data"), list):
        raise ValueError(f"squad2: {path} is not a SQuAD file: expected {{'data': [articles]}}")
    records = []
    for article in data["data"]:
        for paragraph in article.get("paragraphs", []):
            context = paragraph.get("context")
            if not isinstance(context, str) or not context.strip():
                report.skip("missing_context", str(article.get("title")))
                continue
            for qa in paragraph.get("qas", []):
                question = qa.get("question")
                if not isinstance(question, str) or not question.strip():
                    report.skip("missing_question", str(qa.get("id")))
                    continue
                answers = list(dict.fromkeys(a["text"] for a in qa.get("answers", []) if a.get("text")))
                impossible = bool(qa.get("is_impossible", False))
                if impossible and answers:
                    report.skip("impossible_with_answers", str(qa.get("id")))
                    continue
                if not impossible and not answers:
                    report.skip("no_answer_text", str(qa.get("id")))
                    continue
                records.append(DialogueRecord(
                    id=str(qa["id"]), document=context, history=[question.strip()],
                    response=answers[0] if answers else "",
                    meta={"answers": answers, "answerable": not impossible, "title": article.get("title")},
                ))
    return records
