"""Alpha/p grid sweeps: decode a split once per cell, score every cell, pick the operating point.

alpha and the top-p nucleus trade faithfulness against relevance and grammar (Nandwani et al.,
2023, Table 5), so every model and data set needs its own operating point. A sweep is a grid of
cells (decoding method x alpha x p). It runs in two stages so that the generator and the scorer
model never need to be in memory together:

1. generate: one JSONL file per cell under ``<output_dir>/generations/<method>/``;
2. score: one JSON file per cell under ``<output_dir>/scores/<method>/`` (per-response metrics
   and the cell's means).

Every cell file is written atomically (a temporary file renamed into place), so an interrupted
sweep resumes where it stopped and never reads a half-written cell; finished cells are not
redone. The table (:func:`pmi_decode.experiments.report.sweep_table`), the best cell on the dev split
(:func:`best_cell`: highest ROUGE-L + normalised PMI-Faith, as in the paper) and the plots
(:func:`plot_heatmaps`, :func:`plot_frontier`) are built from the score files alone.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import statistics
import tempfile
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Callable, Sequence

from ..adaptive import alpha_label, alpha_order, alpha_setting, alpha_size
from ..decode_config import DecodeConfig

logger = logging.getLogger(__name__)

__all__ = [
    "METHODS",
    "Cell",
    "SweepConfig",
    "load_sweep_config",
    "decode_option_names",
    "grid",
    "cell_paths",
    "atomic_write_text",
    "select_records",
    "generate_cells",
    "score_cells",
    "load_cell_scores",
    "best_cell",
    "paired_differences",
    "plot_heatmaps",
    "plot_frontier",
    "run_sweep",
    "add_sweep_arguments",
    "run_sweep_command",
]

#: Decoding methods a sweep knows: ``generate`` arguments besides ``num_beams``.
METHODS = {
    "beam_search": {"do_sample": False},
    "beam_sampling": {"do_sample": True},
    "greedy": {"do_sample": False, "num_beams": 1},
    "sampling": {"do_sample": True, "num_beams": 1},
}


#: The options each cell sets itself: its alpha and p, and its method's.
CELL_OPTIONS = ("alpha", "p", *sorted({key for method in METHODS.values() for key in method}))

PMI_STATISTICS = ("cpmi_sum", "cpmi_mean", "upmi_sum", "upmi_mean")


@dataclass(frozen=True)
class Cell:
    """One point of the grid."""

    method: str
    alpha: float | str  # a number, or an adaptive rule's spec ("adaptive:1:0.5")
    p: float

    @property
    def name(self) -> str:
        return f"alpha{alpha_label(self.alpha).replace(':', '-')}_p{_fmt(self.p)}"

    @property
    def label(self) -> str:
        return f"{self.method} alpha={alpha_label(self.alpha)} p={_fmt(self.p)}"


def _fmt(x: float) -> str:
    return f"{x:g}"


@dataclass
class SweepConfig:
    """What a sweep decodes, with what, and how it is scored (read from YAML by
    :func:`load_sweep_config`; unknown keys are an error so a typo is never ignored)."""

    dataset: str | None = None
    split: str | None = None
    #: instead of dataset: what `pmi-decode generate --input` takes (a JSONL file, a folder written
    #: by save_to_disk, a hub data set id); split then picks a hub split or one of a DatasetDict
    input: str | None = None
    data_dir: str | None = None
    loader_options: dict = field(default_factory=dict)
    num_turns: int | None = 100
    output_dir: str = "runs/sweep"
    generator: str = "embedded"
    chat_template: bool | None = None
    methods: list = field(default_factory=lambda: ["beam_search", "beam_sampling"])
    alphas: list = field(default_factory=lambda: [0.0, 0.25, 0.5, 1.0])
    ps: list = field(default_factory=lambda: [0.6, 0.75, 0.9, 1.0])
    num_beams: int = 4
    max_new_tokens: int = 40
    max_length: int | None = None
    max_history_turns: int | None = None
    batch_size: int = 4
    seed: int = 0
    scorer_model: str | None = "embedded-gemma"
    scorer_chat_template: bool | None = False
    scorer_batch_size: int = 8
    scorer_max_length: int | None = None
    pmi_statistic: str = "cpmi_sum"
    pmi_bounds: list | None = None
    best_max_grammar_error_rate: float | None = None
    grammar_backend: str = "quire"
    language_tool_url: str | None = None
    language_tool_path: str | None = None
    num_threads: int | None = None
    #: DecodeConfig options applied to every cell besides those above (guards, the end rule, ...;
    #: :func:`decode_option_names`), e.g.
    #: {conditional_end: true, response_no_repeat_ngram_size: 3, block_layout_markers: true}
    decode_options: dict = field(default_factory=dict)
    config_path: str | None = None

    def __post_init__(self):
        if (self.dataset is None) == (self.input is None):
            raise ValueError("give either dataset (a named data set, with split) or input (a JSONL file, a saved "
                             "Dataset folder or a hub data set id), not both" if self.input is not None else
                             "give the dialogues to decode: dataset (a named data set, with split) or input (a "
                             "JSONL file, a saved Dataset folder or a hub data set id)")
        if self.dataset is not None and self.split is None:
            raise ValueError(f"the setting 'split' is required with dataset {self.dataset!r}")
        known = decode_option_names()
        if not isinstance(self.decode_options, dict) or set(self.decode_options) - set(known):
            raise ValueError(f"decode_options must be a mapping with keys from {sorted(known)}, "
                             f"got {self.decode_options!r}")
        shared = self.decoding()  # checks the decoding settings, decode_options included
        unknown = [m for m in self.methods if m not in METHODS]
        if unknown or not self.methods:
            raise ValueError(f"methods must be a non-empty list drawn from {sorted(METHODS)}, got {self.methods!r}")
        for name in ("alphas", "ps"):
            if not isinstance(getattr(self, name), (list, tuple)):  # a lone number in YAML: "alphas: 0.5"
                raise ValueError(f"{name} must be a list, e.g. [{getattr(self, name)!r}], got {getattr(self, name)!r}")
        if not self.alphas or not self.ps:
            raise ValueError("alphas and ps must each hold at least one value")
        for a in self.alphas:
            shared.replace(alpha=a)  # a number in [0, 1] or "adaptive[:MAX_ALPHA[:EXPONENT]]"
        for p in self.ps:
            shared.replace(p=p)
        self.alphas = sorted({alpha_setting(a) for a in self.alphas}, key=alpha_order)
        self.ps = sorted({float(p) for p in self.ps})
        value = self.scorer_batch_size
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"scorer_batch_size must be an integer >= 1, got {value!r}")
        if self.num_turns is not None and (not isinstance(self.num_turns, int) or self.num_turns < 1):
            raise ValueError(f"num_turns must be a positive integer or null (all turns), got {self.num_turns!r}")
        if self.best_max_grammar_error_rate is not None and not 0 <= self.best_max_grammar_error_rate <= 1:
            raise ValueError("best_max_grammar_error_rate must be in [0, 1] or null, "
                             f"got {self.best_max_grammar_error_rate!r}")
        if self.pmi_statistic not in PMI_STATISTICS:
            raise ValueError(f"pmi_statistic must be one of {PMI_STATISTICS}, got {self.pmi_statistic!r}")
        if self.pmi_bounds is not None:
            if len(self.pmi_bounds) != 2 or not float(self.pmi_bounds[0]) < float(self.pmi_bounds[1]):
                raise ValueError(f"pmi_bounds must be [low, high] with low < high, got {self.pmi_bounds!r}")
            self.pmi_bounds = [float(b) for b in self.pmi_bounds]

    def decoding(self, cell: Cell | None = None) -> DecodeConfig:
        """What a cell decodes with: the library's defaults, this config's decoding settings and
        ``decode_options``, then the cell's alpha, p and method (without a cell: what every cell
        shares)."""
        shared = DecodeConfig(**{name: getattr(self, name) for name in _shared_option_names()})
        try:
            shared = shared.replace(**self.decode_options)
        except ValueError as err:
            raise ValueError(f"decode_options.{err}") from None
        return shared if cell is None else shared.replace(alpha=cell.alpha, p=cell.p, **METHODS[cell.method])

    @property
    def source(self) -> str:
        """The dialogues, as the report names them."""
        if self.input is not None:
            return self.input + (f" [{self.split}]" if self.split else "")
        return f"{self.dataset} {self.split}"

    @property
    def cells(self) -> list[Cell]:
        return grid(self.methods, self.alphas, self.ps)

    def generation_settings(self, method: str) -> dict:
        """What a generation cell depends on; a cell file made with other settings is redone."""
        keys = ("dataset", "split", "num_turns", "generator", "chat_template", "num_beams", "max_new_tokens",
                "max_length", "max_history_turns", "batch_size", "seed")
        settings = {"method": method, **{k: getattr(self, k) for k in keys}}
        if self.input is not None:  # only when set, so cells of named data sets stay valid
            settings["input"] = self.input
            digest = input_fingerprint(self.input)
            if digest is not None:  # a file or a saved folder: its content, so an edited input is redone
                settings["input_sha256"] = digest
        if self.decode_options:  # only when set, so cells decoded before the option existed stay valid
            settings["decode_options"] = dict(sorted(self.decode_options.items()))
        return settings

    def scoring_settings(self) -> dict:
        return {"scorer_model": self.scorer_model, "scorer_chat_template": self.scorer_chat_template,
                "scorer_max_length": self.scorer_max_length, "max_history_turns": self.max_history_turns,
                "pmi_statistic": self.pmi_statistic, "grammar_backend": self.grammar_backend}


_FINGERPRINTS: dict = {}


def input_fingerprint(source) -> str | None:
    """The sha256 of an input's bytes: a file's, or every file's under a folder (by relative
    path); ``None`` for a hub data set id. Kept per (path, size, modification time)."""
    path = Path(source)
    if path.is_file():
        files = [path]
    elif path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file())
    else:
        return None
    stats = tuple((str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in files)
    if _FINGERPRINTS.get(str(path), (None,))[0] != stats:
        digest = hashlib.sha256()
        for p in files:
            if p != path:  # a folder's file: its name counts too
                digest.update(str(p.relative_to(path)).encode("utf-8") + b"\0")
            with open(p, "rb") as handle:
                for chunk in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(chunk)
        _FINGERPRINTS[str(path)] = (stats, digest.hexdigest())
    return _FINGERPRINTS[str(path)][1]


def _shared_option_names() -> list[str]:
    """The DecodeConfig options a sweep config sets at its top level (num_beams, seed, ...)."""
    own = {f.name for f in fields(SweepConfig)}
    return [name for name in DecodeConfig.option_names() if name in own]


def decode_option_names() -> list[str]:
    """The DecodeConfig options ``decode_options`` may set: all that the sweep's own settings
    and the cells do not, and that a YAML file can hold."""
    own = {f.name for f in fields(SweepConfig)} | set(CELL_OPTIONS)
    return [name for name in DecodeConfig.file_option_names() if name not in own]


def __getattr__(name: str):
    """``DECODE_OPTIONS`` (option -> type), for one more release: :func:`decode_option_names` now."""
    if name != "DECODE_OPTIONS":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import warnings

    warnings.warn("pmi_decode.experiments.sweep.DECODE_OPTIONS is gone: use decode_option_names() (the options "
                  "are checked by pmi_decode.decode_config.DecodeConfig); this name goes in the next release",
                  DeprecationWarning, stacklevel=2)
    commands = DecodeConfig.cli_defaults()  # every one of these options has a non-None value there
    return {key: type(getattr(commands, key)) for key in decode_option_names()}


def load_sweep_config(path=None, **overrides) -> SweepConfig:
    """Read a sweep YAML (``None``: no file, the defaults); ``overrides`` (e.g. from the command
    line) win over the file. ``input`` replaces the file's ``dataset`` (and the reverse), so one's
    own dialogues can be swept with a shipped config. Relative ``data_dir`` and ``output_dir`` are
    resolved against the current directory."""
    import yaml

    raw = {}
    if path is not None:
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"sweep config not found: {path}")
        try:
            raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        except yaml.YAMLError as err:
            mark = getattr(err, "problem_mark", None)
            where = f"line {mark.line + 1}" if mark is not None else "?"
            raise ValueError(f"{path}: {where}: not valid YAML ({err})") from None
        if not isinstance(raw, dict):
            raise ValueError(f"{path}: expected a mapping of settings, got {type(raw).__name__}")
    given = {k: v for k, v in overrides.items() if v is not None}
    if "input" in given:
        for key in ("dataset", "data_dir", "loader_options"):
            raw.pop(key, None)
        if "split" not in given:
            raw.pop("split", None)
    elif "dataset" in given:
        raw.pop("input", None)
    raw.update(given)
    label = path if path is not None else "sweep"
    known = {f.name for f in fields(SweepConfig)}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ValueError(f"{label}: unknown setting(s) {unknown}; known settings: {sorted(known)}")
    raw["config_path"] = str(path) if path is not None else None
    try:
        return SweepConfig(**raw)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{label}: {err}") from None


def grid(methods: Sequence[str], alphas: Sequence[float], ps: Sequence[float]) -> list[Cell]:
    """Every (method, alpha, p) cell, method-major, then alpha, then p."""
    return [Cell(m, alpha_setting(a), float(p)) for m in methods for a in alphas for p in ps]


def cell_paths(output_dir, cell: Cell) -> dict:
    """``{"generations": ..., "scores": ...}`` file paths of one cell."""
    root = Path(output_dir)
    return {
        "generations": root / "generations" / cell.method / f"{cell.name}.jsonl",
        "scores": root / "scores" / cell.method / f"{cell.name}.json",
    }


def atomic_write_text(path, text: str) -> None:
    """Write a file so that readers see either nothing or all of it (temp file + rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes owner-only files; give the usual permissions
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def select_records(records: Sequence, num_turns: int | None) -> list:
    """``num_turns`` records spread evenly over the split (deterministic, so every cell and every
    rerun decodes the same turns, and not all from the first few conversations)."""
    records = list(records)
    if num_turns is None or num_turns >= len(records):
        return records
    step = len(records) / num_turns
    return [records[int(i * step)] for i in range(num_turns)]


def _as_input(record) -> dict:
    get = record.get if isinstance(record, dict) else (lambda k, d=None: getattr(record, k, d))
    out = {"id": str(get("id")), "document": get("document"), "history": list(get("history"))}
    if get("response") is not None:
        out["response"] = get("response")
    meta = get("meta") or {}
    for key in ("answers", "answerable"):  # what the correctness measures check the responses against
        value = get(key) if get(key) is not None else meta.get(key) if isinstance(meta, dict) else None
        if value is not None:
            out[key] = value
    return out


def _read_json_lines(path: Path) -> list[dict]:
    rows = []
    with open(path, encoding="utf-8") as handle:
        for lineno, line in enumerate(handle, 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as err:
                    raise ValueError(f"{path}: line {lineno}: not valid JSON ({err.msg})") from None
    return rows


def _generation_done(path: Path, settings: dict, *, say: bool = True) -> bool:
    if not path.is_file():
        return False
    rows = _read_json_lines(path)
    if rows and rows[0].get("sweep_settings") == settings:
        return True
    if say:  # once per cell: the plan asks first (say=False), the decoding says it
        from ..batch.sharing import settings_difference

        written = rows[0].get("sweep_settings") if rows else None
        logger.warning("%s was made with other settings (%s); decoding it again", path,
                       settings_difference(written, settings) if rows else "the file is empty")
    return False


def generate_cells(config: SweepConfig, records: Sequence, model, tokenizer, *, progress: bool = True,
                   on_cell_done: Callable[[Cell], None] | None = None,
                   cells: Sequence[Cell] | None = None) -> list[Cell]:
    """Decode ``records`` once per cell whose generation file is missing; return the cells decoded.

    Each cell file holds one line per record: the input fields, ``response`` (gold, when known),
    ``pmi_response`` and ``sweep_settings``. Sampling cells are seeded per batch (see
    :func:`pmi_decode.batch.decode.decode_records`), so a resumed sweep writes the same text.
    """
    from ..batch.decode import decode_records

    inputs = [_as_input(r) for r in records]
    cells = config.cells if cells is None else cells  # a process's share under accelerate launch
    done = []
    todo = []
    for cell in cells:
        settings = config.generation_settings(cell.method)
        if not _generation_done(cell_paths(config.output_dir, cell)["generations"], settings):
            todo.append(cell)
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(cells), initial=len(cells) - len(todo), desc="sweep: generate", unit="cell")
    try:
        for cell in todo:
            settings = config.generation_settings(cell.method)
            outputs = decode_records(inputs, model, tokenizer, config.decoding(cell), progress=progress)
            by_id = {}
            for out in outputs:
                out["sweep_settings"] = settings
                out["cell"] = asdict(cell)
                by_id[out["id"]] = out
            text = "".join(json.dumps(by_id[r["id"]], ensure_ascii=False) + "\n" for r in inputs)
            atomic_write_text(cell_paths(config.output_dir, cell)["generations"], text)
            done.append(cell)
            if bar is not None:
                bar.update(1)
            if on_cell_done is not None:
                on_cell_done(cell)
    finally:
        if bar is not None:
            bar.close()
    return done


# ---------------------------------------------------------------------------- scoring
def _score_done(path: Path, settings: dict, generation_settings: dict) -> bool:
    if not path.is_file():
        return False
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError:
        logger.warning("%s is not valid JSON; scoring the cell again", path)
        return False
    return data.get("scoring_settings") == settings and data.get("generation_settings") == generation_settings


def _response_set(cell: Cell, rows: list[dict]):
    from .report import ResponseSet, method_name, objective_name

    golds = [r.get("response") for r in rows]
    settings = rows[0]["settings"] if rows else {}
    return ResponseSet(
        method=cell.method.replace("_", " ") if cell.method in METHODS else method_name(
            settings.get("num_beams", 1), settings.get("do_sample", False)),
        objective=objective_name(cell.alpha, cell.p),
        ids=[r["id"] for r in rows],
        documents=[r["document"] for r in rows],
        histories=[r["history"] for r in rows],
        responses=[r["pmi_response"] for r in rows],
        golds=golds if all(isinstance(g, str) for g in golds) else None,
        meta={"alpha": cell.alpha, "p": cell.p, "cell": cell.name},
        answers=[r.get("answers") for r in rows],
        answerable=[r.get("answerable") for r in rows],
    )


def score_cells(config: SweepConfig, *, pmi_scorer=None, grammar_checker=None, progress: bool = True,
                cells: Sequence[Cell] | None = None) -> list[Cell]:
    """Score every cell (of ``cells``, default all) whose generation file exists and whose score
    file is missing or stale; return the cells scored. ``pmi_scorer`` (a PMIFaith) and
    ``grammar_checker`` are built from the config when not given."""
    todo = []
    for cell in config.cells if cells is None else cells:
        paths = cell_paths(config.output_dir, cell)
        gen = config.generation_settings(cell.method)
        if paths["generations"].is_file() and not _score_done(paths["scores"], config.scoring_settings(), gen):
            todo.append(cell)
    if not todo:
        return []
    from .report import score_response_set

    if pmi_scorer is None and config.scorer_model:
        from ..batch.distributed import process_group

        pmi_scorer = make_pmi_scorer(config, device=process_group().device)
    if grammar_checker is None:
        grammar_checker = make_grammar_checker(config)
    if isinstance(pmi_scorer, MemoPMIScorer):
        # One call over every cell: the scorer then runs each dialogue's prompts once for all its cells.
        sets = [_response_set(c, _read_json_lines(cell_paths(config.output_dir, c)["generations"])) for c in todo]
        pmi_scorer.prime([(d, h, r) for rs in sets for d, h, r in zip(rs.documents, rs.histories, rs.responses)
                          if r.strip()], progress=progress)
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(todo, desc="sweep: score", unit="cell")
    for cell in todo:
        paths = cell_paths(config.output_dir, cell)
        rows = _read_json_lines(paths["generations"])
        rs = score_response_set(_response_set(cell, rows), pmi_scorer=pmi_scorer, grammar_checker=grammar_checker)
        payload = {
            "cell": asdict(cell),
            "generation_settings": config.generation_settings(cell.method),
            "scoring_settings": config.scoring_settings(),
            "scores": rs.scores,
        }
        atomic_write_text(paths["scores"], json.dumps(payload, ensure_ascii=False, indent=1) + "\n")
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    return todo


def make_pmi_scorer(config: SweepConfig, device=None):
    """The PMI-Faith scorer the config names; a clear error when its model cannot be loaded."""
    from ..metrics.pmi_faith import PMIFaith

    try:
        extra = {"device": device} if device is not None else {}
        scorer = PMIFaith(config.scorer_model, chat_template=config.scorer_chat_template, **extra,
                          batch_size=config.scorer_batch_size, max_length=config.scorer_max_length,
                          max_history_turns=config.max_history_turns,
                          compute=(config.pmi_statistic.split("_")[0],))
    except Exception as err:
        raise RuntimeError(
            f"the PMI-Faith scorer model {config.scorer_model!r} could not be loaded ({type(err).__name__}: {err}). "
            "Set scorer_model in the config to a model you have (a different model than the generator, where "
            "possible: scoring a model's output with the same model flatters it)"
        ) from err
    return MemoPMIScorer(scorer)


class MemoPMIScorer:
    """Scores each distinct (document, history, response) once: neighbouring cells of a sweep
    often produce the same response, and PMI-Faith depends on nothing else."""

    def __init__(self, scorer):
        self.scorer = scorer
        self._memo: dict = {}

    def score(self, documents, histories, responses, **kwargs) -> list[dict]:
        keys = [(d, tuple(h), r) for d, h, r in zip(documents, histories, responses)]
        new = list(dict.fromkeys(k for k in keys if k not in self._memo))
        if new:
            results = self.scorer.score([k[0] for k in new], [list(k[1]) for k in new], [k[2] for k in new], **kwargs)
            self._memo.update(zip(new, results))
        return [dict(self._memo[k]) for k in keys]

    def prime(self, triples, progress: bool = False) -> None:
        """Score many ``(document, history, response)`` triples in one call (so the scorer can
        share each dialogue's prompt across its responses); later ``score`` calls read the memo."""
        if triples:
            self.score([t[0] for t in triples], [t[1] for t in triples], [t[2] for t in triples], progress=progress)


def make_grammar_checker(config: SweepConfig):
    from ..metrics.grammar import get_checker

    if config.grammar_backend == "languagetool":
        return get_checker("languagetool", server_url=config.language_tool_url, local_path=config.language_tool_path)
    return get_checker(config.grammar_backend)


def load_cell_scores(config: SweepConfig) -> list:
    """ResponseSets (with scores) of every cell scored so far, in grid order."""
    sets = []
    for cell in config.cells:
        paths = cell_paths(config.output_dir, cell)
        if not paths["scores"].is_file() or not paths["generations"].is_file():
            continue
        rs = _response_set(cell, _read_json_lines(paths["generations"]))
        data = json.loads(paths["scores"].read_text(encoding="utf-8"))
        rs.scores = data["scores"]
        rs.meta["method_key"] = cell.method
        sets.append(rs)
    return sets


# ---------------------------------------------------------------------------- selection
#: How much answer match a cell may lose against the plainest cell and still be chosen.
ANSWER_MATCH_TOLERANCE = 0.02


def correct_cells(rows: Sequence[dict]) -> list[dict]:
    """The cells no less correct than the plainest one (smallest alpha, then largest p): no
    higher wrong-fact rate, answer match and answers with facts intact (the answer and no wrong
    number or name in the response) each at most :data:`ANSWER_MATCH_TOLERANCE` lower (where
    reference answers exist) and no more answers asserted to unanswerable questions. A garbled
    copy of the document earns PMI-Faith; it does not pass this, nor does a cell that keeps its
    answers and wrong-fact rate by putting the wrong facts beside the answers."""
    if not rows:
        return []
    base = min(rows, key=lambda s: (alpha_order(s["alpha"]), -s["p"]))

    def ok(s, key, slack=0.0, higher_is_better=False):
        if s.get(key) is None or base.get(key) is None:
            return True
        return s[key] >= base[key] - slack if higher_is_better else s[key] <= base[key] + slack

    return [s for s in rows if ok(s, "wrong_fact_rate") and ok(s, "answer_match", ANSWER_MATCH_TOLERANCE, True)
            and ok(s, "answers_intact", ANSWER_MATCH_TOLERANCE, True) and ok(s, "asserts_unanswerable")]


def best_cell(summaries: Sequence[dict], *, method: str | None = None,
              max_grammar_error_rate: float | None = None, require_correct: bool = True) -> dict:
    """The cell with the highest ROUGE-L + normalised PMI-Faith (the paper's dev-set choice)
    among the cells no less correct than the plainest one (:func:`correct_cells`;
    ``require_correct=False``: among all, as the paper did); ties go to the smaller alpha, then
    the larger p (the plainer decoder).

    With ``max_grammar_error_rate``, only cells whose grammar-error rate is at most that are
    candidates: when ROUGE-L varies little across cells, the sum can favour a cell whose
    high PMI-Faith comes from ungrammatical text."""
    rows = [s for s in summaries if method is None or s["method"] == method]
    rows = [s for s in rows if s.get("rouge_l") is not None and s.get("pmi_faith_norm") is not None
            and not math.isnan(s["pmi_faith_norm"])]
    if not rows:
        raise ValueError("no scored cell has both ROUGE-L (needs gold responses) and normalised PMI-Faith")
    if require_correct:
        by_method: dict = {}
        for s in rows:
            by_method.setdefault(s["method"], []).append(s)
        rows = [s for group in by_method.values() for s in correct_cells(group)]
    if max_grammar_error_rate is not None:
        rows = [s for s in rows if s.get("grammar_error_rate") is not None
                and s["grammar_error_rate"] <= max_grammar_error_rate]
        if not rows:
            raise ValueError(f"no cell has a grammar-error rate <= {max_grammar_error_rate}")
    return max(rows, key=lambda s: (round(s["rouge_l"] + s["pmi_faith_norm"], 12), -alpha_size(s["alpha"]), s["p"]))


def pareto_front(summaries: Sequence[dict], x: str = "rouge_l", y: str = "pmi_faith_norm") -> list[dict]:
    """Cells no other cell beats on both ``x`` and ``y`` (sorted by ``x``)."""
    pts = [s for s in summaries if s.get(x) is not None and s.get(y) is not None]
    front = [s for s in pts if not any(o[x] >= s[x] and o[y] >= s[y] and (o[x] > s[x] or o[y] > s[y]) for o in pts)]
    return sorted(front, key=lambda s: s[x])


def paired_differences(sets: Sequence, *, statistic: str = "cpmi_sum") -> list[dict]:
    """Each cell against the smallest-alpha cell of the same method and p, turn by turn.

    Cells decode the same turns, so the per-turn difference removes the turn-to-turn spread that
    dominates a cell mean. Returns one dict per (method, alpha > baseline, p) with, for PMI-Faith
    (``statistic``, raw), ROUGE-L and the ungrammatical share, the mean paired difference and the
    half-width of its normal 95% interval (1.96 standard errors; 0 when n < 2)."""
    by_cell = {(rs.meta["method_key"], rs.meta["alpha"], rs.meta["p"]): rs for rs in sets}
    out = []
    for (method, alpha, p), rs in by_cell.items():  # in the order of ``sets`` (grid order)
        base_alpha = min((a for (m, a, q) in by_cell if m == method and q == p), key=alpha_order)
        if alpha == base_alpha:
            continue
        base = {r["id"]: r for r in by_cell[(method, base_alpha, p)].scores}
        row = {"method": method, "alpha": alpha, "p": p, "baseline_alpha": base_alpha}
        for key, name in ((statistic, "pmi_faith"), ("rouge_l", "rouge_l"), ("ungrammatical", "grammar_error_rate")):
            diffs = [r[key] - base[r["id"]][key] for r in rs.scores
                     if r["id"] in base and key in r and key in base[r["id"]]]
            row[f"{name}_diff"] = statistics.fmean(diffs) if diffs else None
            row[f"{name}_ci95"] = _ci95(diffs) if diffs else None
            row["n"] = len(diffs)
        out.append(row)
    return out


def _ci95(values: Sequence[float]) -> float:
    return 1.96 * statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else 0.0


def paired_differences_markdown(rows: Sequence[dict], statistic: str) -> str:
    if not rows:
        return ""
    lines = ["| Decoding | alpha | p | n | PMI-F (raw) change | ROUGE-L change | grammar errors change |",
             "|---|---:|---:|---:|---:|---:|---:|"]

    def fmt(value, ci, spec, scale=1.0):
        return "n/a" if value is None else f"{scale * value:+{spec}} ± {scale * ci:{spec}}"

    for r in rows:
        lines.append(
            f"| {r['method'].replace('_', ' ')} | {alpha_label(r['alpha'])} | {r['p']:g} | {r['n']} | "
            f"{fmt(r['pmi_faith_diff'], r['pmi_faith_ci95'], '.2f')} | "
            f"{fmt(r['rouge_l_diff'], r['rouge_l_ci95'], '.3f')} | "
            f"{fmt(r['grammar_error_rate_diff'], r['grammar_error_rate_ci95'], '.0f', 100)} pts |")
    base = sorted({r["baseline_alpha"] for r in rows}, key=alpha_order)
    lines.append(
        f"\nEach cell minus the alpha = {', '.join(alpha_label(b) for b in base)} cell of the same method and p, turn by turn "
        f"(same turns in every cell): mean difference ± half-width of its 95% interval (1.96 standard errors). "
        f"PMI-F (raw) is the mean {statistic}; grammar errors in percentage points.")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------- plots
HEATMAPS = (
    ("pmi_faith_norm", "normalised PMI-Faith", "viridis"),
    ("rouge_l", "ROUGE-L", "viridis"),
    ("grammar_error_rate", "grammar-error rate", "magma_r"),
)


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")  # files only, no display needed
    import matplotlib.pyplot as plt

    return plt


def plot_heatmaps(summaries: Sequence[dict], out_dir, *, method: str, prefix: str = "") -> list[Path]:
    """One alpha x p heatmap per metric (normalised PMI-Faith, ROUGE-L, grammar-error rate)."""
    plt = _pyplot()
    rows = [s for s in summaries if s["method"] == method]
    alphas = sorted({s["alpha"] for s in rows}, key=alpha_order)
    ps = sorted({s["p"] for s in rows})
    by = {(s["alpha"], s["p"]): s for s in rows}
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for key, title, cmap in HEATMAPS:
        grid_values = [[_nan(by.get((a, p), {}).get(key)) for p in ps] for a in alphas]
        fig, ax = plt.subplots(figsize=(4.2, 3.4))
        image = ax.imshow(grid_values, cmap=cmap, aspect="auto", origin="upper")
        ax.set_xticks(range(len(ps)), [f"{p:g}" for p in ps])
        ax.set_yticks(range(len(alphas)), [alpha_label(a) for a in alphas])
        ax.set_xlabel("top-p (p)")
        ax.set_ylabel("alpha")
        ax.set_title(f"{title}\n{method.replace('_', ' ')}", fontsize=10)
        for i, row in enumerate(grid_values):
            for j, value in enumerate(row):
                if not math.isnan(value):
                    ax.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=8, color="white",
                            path_effects=_outline())
        fig.colorbar(image, ax=ax)
        fig.tight_layout()
        path = out_dir / f"{prefix}{method}_heatmap_{key}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written


def _outline():
    from matplotlib import patheffects

    return [patheffects.withStroke(linewidth=1.5, foreground="black")]


def _nan(value) -> float:
    return math.nan if value is None else float(value)


def plot_frontier(summaries: Sequence[dict], out_dir, *, method: str | None = None, prefix: str = "") -> Path:
    """Faithfulness (normalised PMI-Faith) against relevance (ROUGE-L), one point per cell, the
    Pareto front drawn as a line and the best cell (ROUGE-L + PMI-F) circled."""
    plt = _pyplot()
    rows = [s for s in summaries if method is None or s["method"] == method]
    rows = [s for s in rows if s.get("rouge_l") is not None and s.get("pmi_faith_norm") is not None]
    fig, ax = plt.subplots(figsize=(5.6, 4.4))
    methods = sorted({s["method"] for s in rows})
    markers = ["o", "s", "^", "D"]
    for m_index, m in enumerate(methods):
        pts = [s for s in rows if s["method"] == m]
        scatter = ax.scatter([s["rouge_l"] for s in pts], [s["pmi_faith_norm"] for s in pts],
                             c=[alpha_size(s["alpha"]) for s in pts], cmap="coolwarm", vmin=0, vmax=1,
                             marker=markers[m_index % len(markers)], label=m.replace("_", " "), edgecolors="k")
        for s in pts:
            ax.annotate(f"a={alpha_label(s['alpha'])},p={s['p']:g}", (s["rouge_l"], s["pmi_faith_norm"]), fontsize=6,
                        xytext=(3, 3), textcoords="offset points")
    if rows:
        fig.colorbar(scatter, ax=ax, label="alpha")
        front = pareto_front(rows)
        ax.plot([s["rouge_l"] for s in front], [s["pmi_faith_norm"] for s in front], "k--", lw=1, label="Pareto front")
        best = best_cell(rows)
        ax.scatter([best["rouge_l"]], [best["pmi_faith_norm"]], s=260, facecolors="none", edgecolors="green",
                   linewidths=2, label="best (ROUGE-L + PMI-F)")
    ax.set_xlabel("relevance: ROUGE-L vs gold")
    ax.set_ylabel("faithfulness: normalised PMI-Faith")
    ax.set_title("faithfulness vs relevance" + (f" ({method.replace('_', ' ')})" if method else ""), fontsize=10)
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{prefix}{method or 'all'}_frontier.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# ---------------------------------------------------------------------------- the whole sweep
def load_split(config: SweepConfig) -> list:
    """The dialogues the sweep decodes: the named data set's split, or the records of ``input``
    (read and validated as ``pmi-decode generate`` reads them), ``num_turns`` of them."""
    if config.input is not None:
        from ..batch.decode import read_dialogues

        records = read_dialogues(config.input, config.split)
    else:
        from ..data import load_dialogues

        records = load_dialogues(config.dataset, config.split, config.data_dir, **(config.loader_options or {}))
    chosen = select_records(records, config.num_turns)
    if not chosen:
        raise ValueError(f"{config.source} has no usable turns" + (f" under {config.data_dir}" if config.data_dir else ""))
    return chosen


def check_models(config: SweepConfig, *, generator: bool, scorer: bool, grammar: bool):
    """Before anything is decoded: check that every model the remaining stages need can be loaded
    (``generator``: cells are still to decode; ``scorer`` and ``grammar``: cells are still to score
    with the config's PMI-Faith scorer and grammar backend) and say in one message what is missing
    and how to get it. Returns the grammar checker it built (``None`` unless ``grammar``)."""
    from ..models import ModelNotAvailableError, unloadable

    checker = None
    roles = ([("generator", config.generator)] if generator else []) + (
        [("scorer_model", config.scorer_model)] if scorer and config.scorer_model else [])
    problems = unloadable(roles)
    if grammar:
        try:
            checker = make_grammar_checker(config)
        except Exception as err:  # each backend reports its own missing piece
            problems.append(f"grammar_backend {config.grammar_backend!r}: {type(err).__name__}: {err}")
    if problems:
        raise ModelNotAvailableError(
            "the sweep needs models that cannot be loaded, so nothing was decoded:\n  - " + "\n  - ".join(problems)
            + "\nInstall them, or change these settings (in the config or on the command line, e.g. "
            "--scorer-model embedded)")
    return checker


def _describe(cell: dict) -> str:
    return (f"alpha={alpha_label(cell['alpha'])}, p={cell['p']:g} (ROUGE-L {cell['rouge_l']:.3f}, PMI-F {cell['pmi_faith_norm']:.3f}, "
            f"grammar errors {100 * cell['grammar_error_rate']:.0f}%)")


def write_report(config: SweepConfig, *, plots: bool = True) -> dict:
    """Table 5 per method, the long table, the best cell and the plots, from the score files."""
    from .report import (add_correctness_measures, add_reader_measures, reader_markdown, summarise, table4_markdown,
                         table5_markdown)

    sets = load_cell_scores(config)
    if not sets:
        raise ValueError(f"no scored cells under {config.output_dir}; run the sweep first")
    for rs in sets:
        rs.notes["q2"] = "not computed in sweeps (use eval/score.py on a cell's generations)"
        add_reader_measures(rs)  # score files written before these measures existed
        add_correctness_measures(rs)
    summaries, bounds = summarise(sets, statistic=config.pmi_statistic, fixed_bounds=config.pmi_bounds)
    for s, rs in zip(summaries, sets):
        s["method_key"] = rs.meta["method_key"]
        s["method"] = rs.meta["method_key"]
    out = Path(config.output_dir)
    parts = [f"# Alpha/p sweep: {config.source}, {len(sets[0].responses)} turns\n",
             f"Generator: {config.generator}; PMI-F scorer: {config.scorer_model}; grammar: {config.grammar_backend}.\n"]
    best = {}
    for method in config.methods:
        if not any(s["method"] == method for s in summaries):
            continue
        parts.append(f"## {method.replace('_', ' ')}\n")
        parts.append(table5_markdown(summaries, bounds, method=method))
        try:
            b = best_cell(summaries, method=method)
            best[method] = {k: b[k] for k in ("alpha", "p", "rouge_l", "pmi_faith_norm", "grammar_error_rate")}
            parts.append(f"Best cell on this split by ROUGE-L + normalised PMI-F: {_describe(b)}.\n")
        except ValueError as err:
            parts.append(f"No best cell: {err}.\n")
        limit = config.best_max_grammar_error_rate
        if limit is not None:
            try:
                g = best_cell(summaries, method=method, max_grammar_error_rate=limit)
                best[f"{method}_grammar_limited"] = {k: g[k] for k in ("alpha", "p", "rouge_l", "pmi_faith_norm",
                                                                       "grammar_error_rate")}
                parts.append(f"Best cell among those with grammar errors <= {100 * limit:g}%: {_describe(g)}.\n")
            except ValueError as err:
                parts.append(f"No best cell with grammar errors <= {100 * limit:g}%: {err}.\n")
    diffs = paired_differences(sets, statistic=config.pmi_statistic)
    if diffs:
        base = ", ".join(alpha_label(b) for b in sorted({d["baseline_alpha"] for d in diffs}, key=alpha_order))
        parts.append(f"## Change against alpha = {base}, turn by turn\n")
        parts.append(paired_differences_markdown(diffs, config.pmi_statistic))
    parts.append("## All cells\n")
    long_rows = [dict(s, method=s["method"].replace("_", " ")) for s in summaries]
    parts.append(table4_markdown(long_rows, bounds, scorer=config.scorer_model))
    parts.append("## What a reader sees\n")
    parts.append(reader_markdown(long_rows))
    missing = len(config.cells) - len(sets)
    if missing:
        parts.append(f"\n{missing} of {len(config.cells)} cells are not scored yet.\n")
    table = "\n".join(parts)
    atomic_write_text(out / "table5.md", table)
    written = [out / "table5.md"]
    if plots:
        for method in config.methods:
            if any(s["method"] == method for s in summaries):
                written += plot_heatmaps(summaries, out / "plots", method=method)
                written.append(plot_frontier(summaries, out / "plots", method=method))
    summary = {"bounds": bounds, "cells": summaries, "best": best, "paired_differences": diffs,
               "files": [str(p) for p in written]}
    atomic_write_text(out / "summary.json", json.dumps(summary, indent=1, default=str) + "\n")
    return {"table": table, **summary}


def run_sweep(config: SweepConfig, *, stages: Sequence[str] = ("generate", "score", "report"), generator=None,
              pmi_scorer=None, grammar_checker=None, records=None, progress: bool = True,
              processes=None) -> dict | None:
    """Run (or resume) the sweep: generate missing cells, score unscored ones, write the report.

    ``generator`` is ``(model, tokenizer)`` (default: loaded from ``config.generator`` only when
    a cell still needs decoding); ``records`` replaces the data-set split (for tests);
    ``processes`` (default :func:`pmi_decode.batch.distributed.process_group`) shares the cells out
    under ``accelerate launch``."""
    unknown = set(stages) - {"generate", "score", "report"}
    if unknown:
        raise ValueError(f"unknown stage(s) {sorted(unknown)}; stages are generate, score, report")
    if config.num_threads:
        import torch

        torch.set_num_threads(int(config.num_threads))
    from ..batch.distributed import process_group, shard_units

    # Under `accelerate launch` each process decodes and scores whole cells (every count-th one of
    # the fixed grid), so each cell file is what one process would write; the main one reports.
    processes = processes or process_group()
    mine = shard_units(config.cells, processes.index, processes.count)
    pending = [c for c in mine if not _generation_done(
        cell_paths(config.output_dir, c)["generations"], config.generation_settings(c.method), say=False)] \
        if "generate" in stages else []
    unscored = [c for c in mine if not _score_done(cell_paths(config.output_dir, c)["scores"],
                                                   config.scoring_settings(), config.generation_settings(c.method))]
    scoring = "score" in stages and bool(unscored)
    grammar_checker = check_models(config, generator=bool(pending) and generator is None,
                                   scorer=scoring and pmi_scorer is None,
                                   grammar=scoring and grammar_checker is None) or grammar_checker
    if "generate" in stages:
        if pending:
            records = records if records is not None else load_split(config)
            if generator is None:
                import torch

                from ..models import load_model_and_tokenizer

                generator = load_model_and_tokenizer(config.generator, dtype=torch.float32, device=processes.device)
            model, tokenizer = generator
            generate_cells(config, records, model, tokenizer, progress=progress and processes.is_main, cells=mine)
            generator = None
        processes.wait()
    if "score" in stages:
        score_cells(config, pmi_scorer=pmi_scorer, grammar_checker=grammar_checker,
                    progress=progress and processes.is_main, cells=mine)
        processes.wait()
    if "report" in stages and processes.is_main:
        return write_report(config)
    return None


# ---------------------------------------------------------------------------- command line
def _number_list(text: str) -> list:
    """--alphas / --ps: comma-separated numbers (alphas may also be adaptive[:MAX[:EXP]])."""
    out = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        try:
            out.append(float(part))
        except ValueError:
            out.append(part)  # an adaptive alpha spec; SweepConfig checks it
    return out


def add_sweep_arguments(parser) -> None:
    """Arguments of ``pmi-decode sweep`` and ``eval/sweep.py`` (the same command)."""
    parser.add_argument("--config", help="sweep YAML (see configs/sweep_*.yaml); optional with --input")
    parser.add_argument("--input", help="dialogues to sweep instead of the config's data set: a JSONL file, a "
                        "folder written by datasets' save_to_disk, or a hub data set id (with --split), as "
                        "`pmi-decode generate --input` takes")
    parser.add_argument("--split", help="the split of a hub data set or of a saved DatasetDict")
    parser.add_argument("--output-dir", help="override output_dir (default runs/sweep)")
    parser.add_argument("--data-dir", help="override data_dir")
    parser.add_argument("--num-turns", type=int, help="override num_turns")
    parser.add_argument("--generator", help="override generator (embedded, a hub id or a folder)")
    parser.add_argument("--scorer-model", help="override scorer_model (the PMI-Faith scorer)")
    parser.add_argument("--grammar-backend", help="override grammar_backend (quire, harper, languagetool)")
    parser.add_argument("--methods", help="override methods, comma-separated (beam_search,beam_sampling,...)")
    parser.add_argument("--alphas", help="override alphas, comma-separated (e.g. 0,0.25,0.5,1)")
    parser.add_argument("--ps", help="override ps, comma-separated (e.g. 0.6,0.9,1)")
    parser.add_argument("--stages", default="generate,score,report",
                        help="comma-separated subset of generate,score,report (default: all)")
    parser.add_argument("--quiet", action="store_true", help="print errors and the final table only")


def run_sweep_command(args) -> int:
    """Run ``pmi-decode sweep`` / ``eval/sweep.py``: load the config (or the defaults, with
    --input), apply the overrides, run the stages, print the table and the best cells."""
    if args.config is None and args.input is None:
        raise ValueError("give --config (a sweep YAML), --input (your own dialogues), or both")
    overrides = {"output_dir": args.output_dir, "data_dir": args.data_dir, "num_turns": args.num_turns,
                 "generator": args.generator, "scorer_model": args.scorer_model, "input": args.input,
                 "grammar_backend": args.grammar_backend,
                 "split": args.split,
                 "methods": args.methods.split(",") if args.methods else None,
                 "alphas": _number_list(args.alphas) if args.alphas else None,
                 "ps": _number_list(args.ps) if args.ps else None}
    config = load_sweep_config(args.config, **overrides)
    stages = [s.strip() for s in args.stages.split(",") if s.strip()]
    result = run_sweep(config, stages=stages, progress=not getattr(args, "quiet", False))
    if result is not None:
        print(result["table"])
        print(f"best cells: {json.dumps(result['best'])}" if result["best"] else
              "best cells: none (table5.md says why under each method)")
        print("files:\n  " + "\n  ".join(result["files"]))
    return 0
