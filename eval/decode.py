"""Decode a data set split with a fine-tuned checkpoint: plain decoding and PMI-Decode side by side.

    python eval/decode.py --config configs/decode_topicalchat.yaml --set checkpoint=runs/topicalchat-bart-large

For each strategy in the config (beam search and beam sampling with 4 beams, as in the paper)
it writes ``{output_dir}/{split}.{strategy}.jsonl``: one line per response with ``id``,
``document``, ``history``, ``response`` (gold), ``plain_response``, ``pmi_response`` and
``settings``, the fields ``pmi-decode score`` reads. Inputs are built with the layout saved by
``training/finetune.py`` next to the checkpoint (``pmi_decode_format.json``), through the same
``encode_dialogue`` used in training, and the unconditional input drops exactly the document.
Interrupted runs resume where they stopped. Under ``accelerate launch`` every process decodes a
share of the batches and the main process merges them (see :mod:`pmi_decode.batch.distributed`).
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

from pmi_decode.config import load_config as _load_config
from pmi_decode.decode_config import DecodeConfig
from pmi_decode.training_data import HOLDOUT_FILE, load_holdout, load_split

logger = logging.getLogger("decode")

DEFAULTS = {
    "checkpoint": None,          # a fine-tuned folder (or any model name pmi_decode.models resolves)
    "dataset": None,
    "data_dir": None,
    "loader_options": {},
    "split": "test",
    "train_split": "train",      # with holdout: the one file that was split by conversation
    "holdout": None,             # the same holdout as the fine-tuning config: decodes its "test" part
    "max_examples": None,
    "output_dir": None,          # default: {checkpoint}/decode
    # each strategy sets its own decoding options (any DecodeConfig field); those below, and any other
    # DecodeConfig field given at the top level (pmi_cap, plausibility, ...), apply to all
    "strategies": {"beam_search": {"num_beams": 4, "do_sample": False},
                   "beam_sampling": {"num_beams": 4, "do_sample": True}},
    "alpha": 0.5,
    "p": 0.9,
    "max_new_tokens": 64,
    "batch_size": 8,
    "seed": 0,
    "threads": None,
    # used only when the checkpoint has no saved input layout
    "max_history_turns": 2,
    "max_source_length": 512,
}


def load_config(path=None, overrides=()) -> dict:
    config = _load_config(DEFAULTS, path, overrides, also=DecodeConfig.file_option_names())
    check_strategies(config["strategies"])
    return config


def check_strategies(strategies) -> None:
    """Each strategy a mapping of decoding options: a misspelt one (``num_beam``) is refused by
    name, not left out while the strategy runs with the default."""
    from pmi_decode.config import unknown_name_error

    if not isinstance(strategies, dict) or not strategies:
        raise ValueError(f"strategies must map names to decoding options, got {strategies!r}")
    known = DecodeConfig.file_option_names()
    for name, strategy in strategies.items():
        if not isinstance(strategy, dict):
            raise ValueError(f"strategies.{name} must map decoding options to values, got {strategy!r}")
        for key in sorted(set(strategy) - set(known)):
            raise unknown_name_error(f"strategies.{name}", "decoding option", key, known)


def records_to_decode(config: dict) -> list[dict]:
    split_config = dict(config, eval_split=config["split"], test_split=config["split"],
                        max_test_examples=config["max_examples"], max_eval_examples=config["max_examples"])
    held_out = load_holdout(config["checkpoint"]) if config.get("holdout") and config.get("checkpoint") else None
    if config.get("holdout") and held_out is None:
        logger.warning("%s has no %s: the held-out conversations are drawn again from this config's holdout and "
                       "loader_options, which must equal the fine-tuning config's", config["checkpoint"], HOLDOUT_FILE)
    records = load_split(split_config, "test", held_out=held_out)  # with a holdout: its test conversations
    return [{"id": r.id, "document": r.document, "history": list(r.history), "response": r.response} for r in records]


def load_checkpoint(checkpoint: str, device=None):
    """(model, tokenizer, InputSpec or None) of a fine-tuned folder; an adapter folder loads on its base."""
    from pmi_decode.models import load_model_and_tokenizer
    from pmi_decode.training_data import load_input_spec

    path = Path(checkpoint)
    if (path / "adapter_config.json").is_file():
        from peft import PeftModel
        from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM, AutoTokenizer

        adapter = json.loads((path / "adapter_config.json").read_text())
        tok_dir = path if (path / "tokenizer_config.json").is_file() else path.parent
        tokenizer = AutoTokenizer.from_pretrained(tok_dir)
        cls = AutoModelForSeq2SeqLM if adapter.get("task_type") == "SEQ_2_SEQ_LM" else AutoModelForCausalLM
        base = cls.from_pretrained(adapter["base_model_name_or_path"])
        # the run added special tokens: the base gets their rows before the adapter's trained ones load
        if len(tokenizer) != base.get_input_embeddings().num_embeddings:
            base.resize_token_embeddings(len(tokenizer))
        model = PeftModel.from_pretrained(base, path).merge_and_unload().eval()
        if not model.config.is_encoder_decoder:
            tokenizer.padding_side = "left"
        spec = load_input_spec(path) or load_input_spec(path.parent)
    else:
        model, tokenizer = load_model_and_tokenizer(checkpoint, device=device)
        # a checkpoint-N folder inside a run: the layout the run saved beside it
        spec = (load_input_spec(path) or load_input_spec(path.parent)) if path.is_dir() else None
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer, spec


def decode(config: dict) -> dict:
    """Decode every strategy of ``config``; returns ``{strategy: output path}``."""
    import torch

    from pmi_decode.batch.decode import decode_records, decode_settings, read_done_ids, reorder_output, write_records
    from pmi_decode.training_data import InputSpec

    if config.get("threads"):
        torch.set_num_threads(int(config["threads"]))

    from pmi_decode.batch.distributed import decode_sharded, process_group

    processes = process_group()  # several under `accelerate launch`: each decodes a share, the main one merges
    model, tokenizer, spec = load_checkpoint(config["checkpoint"], device=processes.device)
    if processes.device is not None:
        model.to(processes.device)  # an adapter folder loads on the CPU first
    if spec is None:  # not fine-tuned here: the library's default layout (chat template if the model has one)
        logger.warning("%s has no pmi_decode_format.json: decoding with the default layout", config["checkpoint"])
        spec = InputSpec(format=None, special_tokens=[], chat_template=None,
                         max_history_turns=config["max_history_turns"], max_source_length=config["max_source_length"])
    records = records_to_decode(config)
    out_dir = Path(config["output_dir"] or Path(config["checkpoint"]) / "decode")
    written = {}
    shared = DecodeConfig(**DecodeConfig.options_in(config))
    layout = dict(format=spec.format, max_length=spec.max_source_length, max_history_turns=spec.max_history_turns,
                  chat_template=spec.chat_template)  # the checkpoint's, as it was trained
    run = dict(compare=True, model_name=config["checkpoint"])
    for name, strategy in config["strategies"].items():
        decoding = shared.replace(**{**DecodeConfig.options_in(strategy), **layout})
        path = out_dir / f"{config['split']}.{name}.jsonl"
        settings = decode_settings(decoding, **run)
        if processes.count > 1:
            decode_sharded(records, path, lambda: (model, tokenizer), decoding, settings=settings,
                           processes=processes, **run)
            written[name] = str(path)
            continue
        done = read_done_ids(path, settings, records)  # the same settings, and the same dialogues
        todo = [r for r in records if str(r["id"]) not in done]
        logger.info("%s: %d to decode (%d already in %s)", name, len(todo), len(done), path)
        if todo:  # batches formed over all records (each keeps its batch and seed), the done ones skipped
            write_records(path, decode_records(records, model, tokenizer, decoding, skip_ids=done, **run))
        reorder_output(path, [r["id"] for r in records])  # decoded by length; written in input order
        written[name] = str(path)
    return written


def main(argv=None) -> dict:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", help="YAML config (configs/decode_<dataset>.yaml)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config key")
    for key in ("checkpoint", "data_dir", "split", "output_dir", "max_examples", "threads"):
        parser.add_argument(f"--{key}", help=f"same as --set {key}=...")
    args = parser.parse_args(argv)
    overrides = list(args.set) + [f"{k}={getattr(args, k)}" for k in
                                  ("checkpoint", "data_dir", "split", "output_dir", "max_examples", "threads")
                                  if getattr(args, k) is not None]
    written = decode(load_config(args.config, overrides))
    print(json.dumps(written, indent=2))
    return written


if __name__ == "__main__":
    from pmi_decode.config import run_script

    raise SystemExit(run_script(main))
