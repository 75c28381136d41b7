"""Inputs that several benchmarks share: random-weight models of real sizes, random token inputs
shaped like the paper's data sets, and real dialogues from the data folder.

``benchmarks/decode_speed.py`` and ``benchmarks/nucleus_sizes.py`` time and inspect the same
random-weight models on the same random inputs; ``benchmarks/cli_throughput.py``,
``benchmarks/nucleus_projection.py`` and ``benchmarks/nucleus_sizes.py`` draw their real
dialogues the same way, so their numbers describe the same sample.
"""

from __future__ import annotations

from pathlib import Path

__all__ = [
    "DATA_FOLDERS",
    "DIALOGUE_SPLITS",
    "MEAN_WORDS",
    "REAL_SIZES",
    "TOKENS_PER_WORD",
    "random_dialogue_inputs",
    "random_weight_model",
    "real_dialogue_records",
    "shared_data_dir",
]

#: Mean words per document / history / response: the paper's Table 7 for ``faithdial``,
#: ``multidoc2dial`` and ``topicalchat``; the ``*-data`` entries are the same means on the files in
#: the data folder (the embedded tokenizer's token counts divided by :data:`TOKENS_PER_WORD`; see
#: ``benchmarks/results/real_lengths/``). Offline, Topical-Chat documents lack the article sections
#: and fun facts, and MultiDoc2Dial has 3 documents.
MEAN_WORDS = {
    "faithdial": (23, 69, 18), "multidoc2dial": (166, 93, 18), "topicalchat": (241, 199, 20),
    "topicalchat-data": (138, 202, 20), "multidoc2dial-data": (19, 64, 18),
}
TOKENS_PER_WORD = 1.3

#: The split of each data set whose dialogues the real-length benchmarks draw.
DIALOGUE_SPLITS = {"topicalchat": "validation", "multidoc2dial": "validation"}
#: The folder of each data set under ``shared/data``.
DATA_FOLDERS = {"topicalchat": "topicalchat", "multidoc2dial": "multidoc2dial"}


#: Configs of real sizes for the random-weight models (keyword arguments of each config class).
#: ``llama-1.7b`` is shaped like SmolLM2-1.7B and ``smollm2-135m`` like the embedded SmolLM2-135M
#: (both Llama architecture; their ``config.json`` on the hub); ``bart-large`` like facebook/bart-large.
REAL_SIZES = {
    "bart-base": ("bart", dict(d_model=768, encoder_layers=6, decoder_layers=6, encoder_attention_heads=12,
                               decoder_attention_heads=12, encoder_ffn_dim=3072, decoder_ffn_dim=3072,
                               vocab_size=50265)),
    "bart-large": ("bart", dict(d_model=1024, encoder_layers=12, decoder_layers=12, encoder_attention_heads=16,
                                decoder_attention_heads=16, encoder_ffn_dim=4096, decoder_ffn_dim=4096,
                                vocab_size=50265)),
    "gpt2-small": ("gpt2", dict()),
    "llama-1.7b": ("llama", dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=24,
                                 num_attention_heads=32, num_key_value_heads=32, vocab_size=49152,
                                 max_position_embeddings=8192, rope_theta=130000.0, tie_word_embeddings=True)),
    "smollm2-135m": ("llama", dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                                   num_attention_heads=9, num_key_value_heads=3, vocab_size=49152,
                                   max_position_embeddings=8192, rope_theta=100000.0, tie_word_embeddings=True)),
}


def random_weight_model(name: str, device: str, logit_scale: float = 1.0, dtype: str = "float32"):
    """A model for timing: one of :data:`REAL_SIZES` (random weights from a config of the real size,
    seeded, built on ``device`` in ``dtype``) or ``embedded`` (the real SmolLM2 model), in eval mode.

    ``logit_scale`` multiplies a random model's output layer (untied from the embeddings, same
    cost) to sharpen its next-token distribution like a trained model's; random weights give a
    near-flat one whose nucleus is most of the vocabulary (``benchmarks/nucleus_sizes.py``).
    """
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSeq2SeqLM

    torch.manual_seed(0)
    torch_dtype = getattr(torch, dtype)
    if name == "embedded":
        from ..models import load_model_and_tokenizer

        model, _ = load_model_and_tokenizer("embedded")
        model = model.to(torch_dtype)
    elif name in REAL_SIZES:
        model_type, kwargs = REAL_SIZES[name]
        extra = dict(forced_bos_token_id=None, forced_eos_token_id=None) if model_type == "bart" else {}
        cfg = AutoConfig.for_model(model_type, **kwargs, **extra)
        auto = AutoModelForSeq2SeqLM if cfg.is_encoder_decoder else AutoModelForCausalLM
        # built where it runs: a 1.7B model initialised on the host first would take minutes
        with torch.device(device):
            model = auto.from_config(cfg, dtype=torch_dtype)
    else:
        raise SystemExit(f"unknown model {name!r}: use one of {', '.join(REAL_SIZES)} or embedded")
    if logit_scale != 1.0:
        if name == "embedded":
            raise SystemExit("--logit-scale is for the random-weight models; the embedded model is trained")
        head = model.get_output_embeddings()
        head.weight = torch.nn.Parameter(head.weight.detach().clone() * logit_scale)
        model.config.tie_word_embeddings = False
    model.generation_config.pad_token_id = model.generation_config.pad_token_id or 0
    for key in ("forced_bos_token_id", "forced_eos_token_id", "no_repeat_ngram_size", "min_length"):
        setattr(model.generation_config, key, None if "forced" in key else 0)
    return model.to(device).eval()


def random_dialogue_inputs(model, dataset: str, batch: int, device: str, seed: int = 0,
                           doc_tokens: int | None = None) -> dict:
    """Random token ids shaped like ``dataset`` (:data:`MEAN_WORDS`): ``conditional`` = document +
    history, ``unconditional`` = history, rows of slightly different lengths so padding is exercised.
    ``doc_tokens`` sets the longest row's document length in tokens instead of the data set's mean."""
    import torch

    from ..inputs import pad_batch

    doc_words, hist_words, _ = MEAN_WORDS[dataset]
    gen = torch.Generator().manual_seed(seed)
    vocab = model.config.get_text_config().vocab_size
    left = not model.config.is_encoder_decoder
    conds, unconds = [], []
    for row in range(batch):
        scale = 1.0 - 0.1 * (row % 3)  # rows of different lengths
        doc_length = doc_tokens if doc_tokens is not None else doc_words * TOKENS_PER_WORD
        doc = torch.randint(100, vocab - 100, (max(1, int(doc_length * scale)),), generator=gen)
        hist = torch.randint(100, vocab - 100, (max(1, int(hist_words * TOKENS_PER_WORD * scale)),), generator=gen)
        conds.append(torch.cat([doc, hist]).tolist())
        unconds.append(hist.tolist())
    return {
        "conditional": pad_batch(conds, 0, left=left, device=device),
        "unconditional": pad_batch(unconds, 0, left=left, device=device),
    }


def real_dialogue_records(dataset: str, data_dir: Path) -> list[dict]:
    """The :data:`DIALOGUE_SPLITS` split of ``dataset`` from its official files in ``data_dir``, as
    ``pmi-decode generate`` input records (``id``, ``document``, ``history``, ``response``); dialogues
    without history are left out. Topical-Chat: the rare split without personal knowledge;
    MultiDoc2Dial: the small validation files."""
    from ..data import load_dialogues

    options = {"rare": True, "skip_personal_knowledge": True} if dataset == "topicalchat" else {}
    if dataset == "multidoc2dial":
        options = {"dial_file": str(data_dir / "multidoc2dial_dial_small_validation.json"),
                   "doc_file": str(data_dir / "multidoc2dial_doc_small.json")}
    recs = load_dialogues(dataset, DIALOGUE_SPLITS[dataset], data_dir, **options)
    return [{"id": r.id, "document": r.document, "history": list(r.history), "response": r.response}
            for r in recs if r.history]


def shared_data_dir(dataset: str, checkout: Path) -> Path:
    """``shared/data/<folder>`` in the first folder above ``checkout`` that has one."""
    for folder in checkout.parents:
        candidate = folder / "shared" / "data" / DATA_FOLDERS[dataset]
        if candidate.is_dir():
            return candidate
    raise SystemExit(f"no shared/data/{DATA_FOLDERS[dataset]} above {checkout}: pass --data-dir")


def save_results(out_dir, name: str, meta: dict, rows: list[dict], table: str, quiet: bool = False) -> None:
    """Write ``<name>.json`` (the run's settings, with the load average at the end so a busy
    machine shows, and every row) and ``<name>.md`` (the table) under ``out_dir``, and print the table."""
    import json
    import os

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    meta = dict(meta, load_average_at_end=os.getloadavg())
    (out / f"{name}.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    (out / f"{name}.md").write_text(table)
    if not quiet:
        print("\n" + table)
