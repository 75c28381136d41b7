"""``pmi-decode demo``: plain decoding and PMI-Decode side by side on a few real dialogues.

The shipped dialogues (``demo_data/dialogues.jsonl``) are cut from Topical-Chat and
MultiDoc2Dial. Each response is shown with its log-probability gain from the document,
log P(r | d, h) - log P(r | h) under the same model: the quantity PMI-Decode pushes up.
"""

from __future__ import annotations

import json
import shutil
import textwrap
from importlib import resources
from pathlib import Path

from .batch.decode import decode_records, pmi_gain, read_dialogues_jsonl
from .decode_config import DecodeConfig
from .inputs import DialogueFormat

DOCUMENT_CHARS = 300
#: What the demo changes from the defaults (of the library, or of the command): short responses,
#: so the two columns stay readable.
DEMO_OPTIONS = {"max_new_tokens": 40}


def demo_dialogues_path() -> Path:
    return Path(str(resources.files("pmi_decode").joinpath("demo_data", "dialogues.jsonl")))


def _shorten(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rsplit(" ", 1)[0] + " …"


def _side_by_side(left: str, right: str, width: int) -> list[str]:
    col = max(20, (width - 3) // 2)
    a = textwrap.wrap(left, col) or [""]
    b = textwrap.wrap(right, col) or [""]
    rows = max(len(a), len(b))
    a += [""] * (rows - len(a))
    b += [""] * (rows - len(b))
    return [f"{x:<{col}} │ {y}" for x, y in zip(a, b)]


def format_dialogue(record: dict, index: int, total: int, *, width: int, labels: tuple[str, str], gains=None) -> str:
    """One dialogue as text: document (shortened), history, gold response, then both responses."""
    fmt = DialogueFormat()
    wrap = lambda text, prefix: textwrap.fill(  # noqa: E731
        text, width, initial_indent=prefix, subsequent_indent=" " * len(prefix)
    )
    lines = ["=" * width, f"[{index}/{total}] {record['id']}"]
    lines.append(wrap(_shorten(record["document"], DOCUMENT_CHARS), "Document: "))
    for speaker, turn in zip(fmt.speaker_prefixes(len(record["history"])), record["history"]):
        lines.append(wrap(" ".join(turn.split()), "  " + speaker))
    if record.get("response"):
        lines.append(wrap(" ".join(record["response"].split()), "  Gold agent: "))
    lines.append("-" * width)
    left, right = labels
    if gains is not None:
        left += f"  [gain {gains[0]:+.1f}]"
        right += f"  [gain {gains[1]:+.1f}]"
    lines.extend(_side_by_side(left, right, width))
    lines.extend(_side_by_side(record["plain_response"], record["pmi_response"], width))
    return "\n".join(lines)


def run_demo(
    path=None,
    config: DecodeConfig | None = None,
    *,
    model_name: str = "embedded",
    device=None,
    dtype=None,
    width: int | None = None,
    show_gain: bool = True,
    print_fn=print,
    model_and_tokenizer=None,
    save=None,
    **options,
) -> list[dict]:
    """Decode the demo dialogues both ways, print them and return the output records.

    ``config`` (a :class:`~pmi_decode.decode_config.DecodeConfig`; without one, the library
    defaults with :data:`DEMO_OPTIONS`) and ``options`` (its fields as keywords, applied on top)
    say how; the guards apply to both columns alike. All dialogues form one batch. ``save``: a
    JSON file to write the run to (records, gains, means, settings), so the numbers quoted
    elsewhere can be checked against the run that made them."""
    if "guards" in options:  # the guard options as one mapping, as this function took them before
        import warnings

        warnings.warn("run_demo(guards={...}) is deprecated: pass the options themselves (or a DecodeConfig)",
                      DeprecationWarning, stacklevel=2)
        options = {**(options.pop("guards") or {}), **options}
    records = read_dialogues_jsonl(path or demo_dialogues_path())
    config = DecodeConfig.from_options(config if config is not None else DecodeConfig(**DEMO_OPTIONS), **options)
    config = config.replace(batch_size=len(records))
    if model_and_tokenizer is None:
        from .models import load_model_and_tokenizer

        model_and_tokenizer = load_model_and_tokenizer(model_name, device=device, dtype=dtype)
    model, tokenizer = model_and_tokenizer
    width = width or min(120, max(60, shutil.get_terminal_size((100, 24)).columns))
    search = "greedy search" if config.num_beams == 1 else f"beam search, {config.num_beams} beams"
    labels = (f"PLAIN ({search})", f"PMI-DECODE (alpha={config.alpha}, p={config.p:g})")
    outputs = list(decode_records(records, model, tokenizer, config, compare=True, model_name=model_name))
    by_id = {str(o["id"]): o for o in outputs}
    ordered = [by_id[str(r["id"])] for r in records]
    kw = dict(chat_template=config.chat_template, max_length=config.max_length)
    max_history_turns = config.max_history_turns
    totals = [0.0, 0.0]
    for i, out in enumerate(ordered, start=1):
        gains = None
        if show_gain:
            gains = tuple(
                pmi_gain(model, tokenizer, out["document"], out["history"][-max_history_turns:] if max_history_turns
                         else out["history"], out[key], **kw)
                for key in ("plain_response", "pmi_response")
            )
            out["plain_gain"], out["pmi_gain"] = gains
            totals[0] += gains[0]
            totals[1] += gains[1]
        print_fn(format_dialogue(out, i, len(ordered), width=width, labels=labels, gains=gains))
    print_fn("=" * width)
    if show_gain:
        n = len(ordered)
        print_fn(f"Mean gain: plain {totals[0] / n:+.1f}, PMI-Decode {totals[1] / n:+.1f}")
        print_fn(
            textwrap.fill(
                f"(gain = log P(response | document, history) - log P(response | history), in nats, under "
                f"{model_name}: how much more likely the document makes the response)",
                width,
            )
        )
    if save is not None:
        n = len(ordered)
        run = {
            "settings": ordered[0]["settings"] if ordered else None,
            "mean_gain": {"plain": totals[0] / n, "pmi": totals[1] / n} if show_gain and n else None,
            "records": [{k: out.get(k) for k in ("id", "plain_response", "pmi_response", "plain_gain", "pmi_gain")}
                        for out in ordered],
        }
        Path(save).parent.mkdir(parents=True, exist_ok=True)
        Path(save).write_text(json.dumps(run, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return ordered
