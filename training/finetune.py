"""Fine-tune a seq2seq or decoder-only model on a document-grounded dialogue data set.

    python training/finetune.py --config configs/topicalchat.yaml --set data_dir=/data/Topical-Chat
    python training/finetune.py --config configs/topicalchat.yaml --max_steps 30 --output_dir runs/try

The paper's recipe (Nandwani et al., 2023, after the FaithDial/Topical-Chat baselines) is the
default: BART-large, learning rate 6.25e-5 with a linear schedule and 4% warm-up, effective batch
32 through gradient accumulation, source length 512, the last 2 history turns, speaker and
knowledge tokens added to the tokenizer. Training runs on the transformers ``Trainer`` with early
stopping on validation loss, checkpoints and resume; ``lora:`` switches to a peft LoRA adapter.
The input layout is saved as ``pmi_decode_format.json`` so ``eval/decode.py`` rebuilds the same
inputs.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
from dataclasses import fields, replace
from pathlib import Path

from pmi_decode.config import load_config as _load_config
from pmi_decode.inputs import DialogueFormat
from pmi_decode.training_data import (
    SPECIAL_TOKEN_FORMAT,
    SPECIAL_TOKENS,
    DialogueCollator,
    InputSpec,
    add_special_tokens,
    build_examples,
    load_split,
    save_holdout,
    save_input_spec,
)

logger = logging.getLogger("finetune")

DEFAULTS = {
    "dataset": None,            # faithdial | multidoc2dial | topicalchat
    "data_dir": None,
    "loader_options": {},       # passed to load_dialogues (e.g. rare, reading_set)
    "train_split": "train",
    "eval_split": "validation",
    "holdout": None,            # {key, test, eval, seed}: split one file by conversation instead
    "max_train_examples": None,
    "max_eval_examples": None,
    "model": "facebook/bart-large",
    "output_dir": "runs/finetune",
    "special_tokens": True,     # add <knowledge>/<user>/<agent> and use them as the prefixes
    "format": None,             # DialogueFormat fields, overriding the default layout
    "chat_template": False,
    "max_source_length": 512,
    "max_target_length": 128,
    "max_history_turns": 2,
    "learning_rate": 6.25e-5,
    "lr_scheduler_type": "linear",
    "warmup_ratio": 0.04,
    "per_device_train_batch_size": 4,
    "gradient_accumulation_steps": 8,
    "per_device_eval_batch_size": 8,
    "num_train_epochs": 10,
    "max_steps": -1,
    "eval_strategy": "epoch",
    "eval_steps": None,
    "logging_steps": 10,
    "early_stopping_patience": 2,
    "save_total_limit": 2,
    "fp16": False,
    "bf16": False,
    "seed": 42,
    "threads": None,            # torch.set_num_threads
    "eval_before_training": False,
    "resume_from_checkpoint": None,
    "lora": None,               # {r, alpha, dropout, target_modules, merge}
    "training_args": {},        # any other TrainingArguments
    "num_proc": None,           # processes that encode the examples (datasets.map)
    "examples_cache": None,     # where encoded examples are kept (default: <output_dir>/examples_cache)
}


def load_config(path=None, overrides=()) -> dict:
    """Defaults, then the YAML file, then ``key=value`` overrides (dotted keys reach nested ones)."""
    return _load_config(DEFAULTS, path, overrides)


_WHOLE = ("max_source_length", "max_target_length", "per_device_train_batch_size", "gradient_accumulation_steps",
          "per_device_eval_batch_size", "logging_steps", "seed", "max_steps")
_WHOLE_OR_NONE = ("max_history_turns", "eval_steps", "early_stopping_patience", "save_total_limit", "threads",
                  "num_proc", "max_train_examples", "max_eval_examples")
_NUMBER = ("learning_rate", "num_train_epochs", "warmup_ratio")
_MAPPING_OR_NONE = ("loader_options", "training_args", "format", "holdout", "lora")
_TRUE_OR_FALSE = ("special_tokens", "chat_template", "fp16", "bf16", "eval_before_training")


def check_config(config: dict) -> None:
    """Each key's type, before data or a model is loaded, with a message that names the key (a
    value that reached ``int()`` or ``TrainingArguments`` failed there with a message that did
    not, or after the first training steps)."""
    def whole(value) -> bool:
        return not isinstance(value, bool) and (isinstance(value, int) or (
            isinstance(value, float) and value.is_integer()))

    for key in _WHOLE + _WHOLE_OR_NONE:
        value = config.get(key)
        if not (whole(value) or (value is None and key in _WHOLE_OR_NONE)):
            raise ValueError(f"{key} must be a whole number{' (or null)' if key in _WHOLE_OR_NONE else ''}, "
                             f"got {value!r}")
    for key in _NUMBER:
        value = config.get(key)
        if isinstance(value, str):  # YAML 1.1 reads 1e-4 (no decimal point) as a string
            try:
                config[key] = value = float(value)
            except ValueError:
                pass
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"{key} must be a number, got {value!r}")
    for key in _MAPPING_OR_NONE:
        if config.get(key) is not None and not isinstance(config[key], dict):
            raise ValueError(f"{key} must be a mapping of keys to values (or null), got {config[key]!r}")
    for key in _TRUE_OR_FALSE:
        if not isinstance(config.get(key), bool):
            raise ValueError(f"{key} must be true or false, got {config.get(key)!r}")
    if config["max_steps"] != -1 and config["max_steps"] < 1:
        raise ValueError(f"max_steps must be -1 (train num_train_epochs) or at least 1, got {config['max_steps']}")
    if config["save_total_limit"] is not None and config["save_total_limit"] < 1:
        raise ValueError(f"save_total_limit must be at least 1 (or null: keep every checkpoint), "
                         f"got {config['save_total_limit']}")
    if config.get("dataset"):
        from pmi_decode.data import check_loader_options

        check_loader_options(config["dataset"], config.get("loader_options") or {})
    from transformers import TrainingArguments

    known = {f.name for f in fields(TrainingArguments)}
    unknown = sorted(set(config.get("training_args") or {}) - known)
    if unknown:
        raise ValueError(f"training_args: {unknown} are not TrainingArguments fields")


def input_spec(config: dict) -> InputSpec:
    """The input layout: special-token prefixes (or the plain default ones), then ``format`` overrides."""
    fmt = SPECIAL_TOKEN_FORMAT if config["special_tokens"] else DialogueFormat()
    if config.get("format"):
        allowed = {f.name for f in fields(DialogueFormat)}
        bad = set(config["format"]) - allowed
        if bad:
            raise ValueError(f"unknown format keys {sorted(bad)}; allowed: {sorted(allowed)}")
        fmt = replace(fmt, **config["format"])
    return InputSpec(
        format=fmt, max_history_turns=config["max_history_turns"], max_source_length=config["max_source_length"],
        max_target_length=config["max_target_length"], chat_template=bool(config["chat_template"]),
        special_tokens=list(SPECIAL_TOKENS) if config["special_tokens"] else [],
    )


def load_model(name: str):
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSeq2SeqLM, AutoTokenizer

    from pmi_decode.models import resolve_model

    path = resolve_model(name)
    config = AutoConfig.from_pretrained(path)
    cls = AutoModelForSeq2SeqLM if getattr(config, "is_encoder_decoder", False) else AutoModelForCausalLM
    model = cls.from_pretrained(path)
    tokenizer = AutoTokenizer.from_pretrained(path)
    return model, tokenizer


def _apply_lora(model, lora: dict, new_token_ids: list[int], is_encoder_decoder: bool):
    from peft import LoraConfig, TaskType, get_peft_model

    allowed = {"r", "alpha", "dropout", "target_modules", "merge"}
    bad = set(lora) - allowed
    if bad:
        raise ValueError(f"unknown lora keys {sorted(bad)}; allowed: {sorted(allowed)}")
    peft_config = LoraConfig(
        task_type=TaskType.SEQ_2_SEQ_LM if is_encoder_decoder else TaskType.CAUSAL_LM,
        r=int(lora.get("r", 16)), lora_alpha=int(lora.get("alpha", 32)), lora_dropout=float(lora.get("dropout", 0.05)),
        target_modules=lora.get("target_modules"),
        # the new speaker/knowledge tokens need trained embeddings; only their rows are trained
        trainable_token_indices=list(new_token_ids) or None,
    )
    model = get_peft_model(model, peft_config)
    model.print_trainable_parameters()
    return model


def finetune(config: dict, *, model=None, tokenizer=None, train_records=None, eval_records=None) -> dict:
    """Train as ``config`` says; returns a summary (output_dir, losses, steps)."""
    import torch
    from transformers import EarlyStoppingCallback, Trainer, TrainingArguments, set_seed

    check_config(config)
    if config.get("threads"):
        torch.set_num_threads(int(config["threads"]))
    set_seed(int(config["seed"]))
    if model is None or tokenizer is None:
        model, tokenizer = load_model(config["model"])
    enc_dec = bool(getattr(model.config, "is_encoder_decoder", False))
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    spec = input_spec(config)
    new_ids = add_special_tokens(tokenizer, model, spec.special_tokens)
    if model.generation_config.pad_token_id is None:
        model.generation_config.pad_token_id = tokenizer.pad_token_id
    if config.get("holdout") and config.get("dataset"):  # the groups held out, for decoding exactly those later
        save_holdout(config["output_dir"], config)
    elif config.get("dataset") and config.get("eval_split") == config.get("train_split"):
        logger.warning("eval_split is train_split (%s) and no holdout is set: the validation loss is measured on "
                       "training data", config["train_split"])
    if train_records is None:
        train_records = load_split(config, "train")
    if eval_records is None:
        eval_records = load_split(config, "eval")
    if not train_records:
        raise ValueError(f"no training records in {config.get('dataset')!r} split {config.get('train_split')!r} "
                         f"of {config.get('data_dir')!r}: check dataset, data_dir and the split settings")
    encode = dict(is_encoder_decoder=enc_dec, spec=spec, num_proc=config.get("num_proc"),
                  cache_dir=config.get("examples_cache") or Path(config["output_dir"]) / "examples_cache")
    train = build_examples(train_records, tokenizer, **encode)
    evals = build_examples(eval_records, tokenizer, **encode) if eval_records else None
    train_set, eval_set = train.dataset, evals.dataset if evals is not None else None
    if len(train_set) == 0:
        raise ValueError(f"no training examples: all {len(train_records)} records were left out when encoded (see "
                         f"the warnings above; max_source_length={config['max_source_length']}, "
                         f"max_target_length={config['max_target_length']})")
    if (eval_set is None or len(eval_set) == 0) and config["eval_strategy"] not in (False, None, "no"):
        logger.warning("the validation split (%s) holds no examples: training runs without validation, early "
                       "stopping or picking the best checkpoint (eval_strategy=%s asked for them)",
                       config.get("eval_split"), config["eval_strategy"])
        eval_set = None
    logger.info("train %d examples (%d prompts and %d responses cut), eval %d", len(train_set), train.num_truncated,
                train.num_responses_cut, len(eval_set) if eval_set is not None else 0)
    lora = config.get("lora")
    if lora:
        model = _apply_lora(model, dict(lora), new_ids, enc_dec)
    out = Path(config["output_dir"])
    warmup = config["warmup_ratio"]
    if isinstance(warmup, bool) or not isinstance(warmup, (int, float)) or not 0 <= warmup < 1:
        raise ValueError(f"warmup_ratio must be a share of the training steps in [0, 1), got {warmup!r}")
    strategy = config["eval_strategy"]
    strategy = "no" if strategy in (False, None) or eval_set is None else str(strategy)  # YAML reads `no` as False
    if strategy not in ("no", "steps", "epoch"):
        raise ValueError(f"eval_strategy must be no, steps or epoch, got {config['eval_strategy']!r}")
    args = dict(
        output_dir=str(out), learning_rate=float(config["learning_rate"]),
        lr_scheduler_type=config["lr_scheduler_type"], warmup_steps=float(config["warmup_ratio"]),
        per_device_train_batch_size=int(config["per_device_train_batch_size"]),
        gradient_accumulation_steps=int(config["gradient_accumulation_steps"]),
        per_device_eval_batch_size=int(config["per_device_eval_batch_size"]),
        num_train_epochs=float(config["num_train_epochs"]), max_steps=int(config["max_steps"]),
        eval_strategy=strategy, save_strategy=strategy if strategy != "no" else "steps",
        logging_steps=int(config["logging_steps"]), save_total_limit=config["save_total_limit"],
        load_best_model_at_end=strategy != "no", metric_for_best_model="eval_loss", greater_is_better=False,
        fp16=bool(config["fp16"]), bf16=bool(config["bf16"]), seed=int(config["seed"]),
        report_to="none", remove_unused_columns=False, logging_first_step=True,
    )
    if config.get("eval_steps"):
        args["eval_steps"] = args["save_steps"] = config["eval_steps"]
    args.update(config.get("training_args") or {})
    callbacks = []
    if strategy != "no" and config.get("early_stopping_patience"):
        callbacks.append(EarlyStoppingCallback(early_stopping_patience=int(config["early_stopping_patience"])))
    trainer = Trainer(model=model, args=TrainingArguments(**args), train_dataset=train_set, eval_dataset=eval_set,
                      data_collator=DialogueCollator(tokenizer), processing_class=tokenizer, callbacks=callbacks)
    summary = {"output_dir": str(out), "train_examples": len(train_set), "train_responses_cut": train.num_responses_cut,
               "eval_examples": len(eval_set) if eval_set is not None else 0}
    if eval_set is not None and config.get("eval_before_training"):
        summary["eval_loss_before"] = trainer.evaluate()["eval_loss"]
        logger.info("validation loss before training: %.4f", summary["eval_loss_before"])
    resume = config.get("resume_from_checkpoint")
    start = _resumed_step(resume, out)  # before training writes checkpoints of its own
    result = trainer.train(resume_from_checkpoint=resume)
    # Trainer averages the loss over the steps of this call only: a resumed run's train_loss says so
    summary.update(train_loss=result.training_loss, train_loss_from_step=start, global_step=result.global_step)
    if eval_set is not None:
        summary["eval_loss_after"] = trainer.evaluate()["eval_loss"]
        logger.info("validation loss after training: %.4f", summary["eval_loss_after"])
    final = trainer.model
    if lora:
        final.save_pretrained(out / "adapter")
        if lora.get("merge", True):
            final = final.merge_and_unload()
    final.save_pretrained(out)
    tokenizer.save_pretrained(out)
    save_input_spec(out, spec)
    summary["log_history"] = trainer.state.log_history
    (out / "finetune_summary.json").write_text(json.dumps(summary, indent=2, default=_json_default) + "\n")
    return summary


def _resumed_step(resume, output_dir: Path) -> int:
    """The step a run resumed from (0 for a fresh run): ``resume_from_checkpoint`` as Trainer reads
    it, a checkpoint folder or ``True`` for the newest one in ``output_dir``."""
    from transformers.trainer_utils import get_last_checkpoint

    if resume is None or resume is False:
        return 0
    folder = get_last_checkpoint(str(output_dir)) if resume is True else resume
    state = Path(folder) / "trainer_state.json"
    return int(json.loads(state.read_text())["global_step"]) if state.is_file() else 0


def _json_default(value):
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return str(value)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", help="YAML config (configs/<dataset>.yaml)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config key (repeatable; dotted keys for nested ones, e.g. lora.r=8)")
    for key in ("model", "data_dir", "output_dir", "max_steps", "learning_rate", "resume_from_checkpoint",
                "threads", "max_train_examples", "max_eval_examples"):
        parser.add_argument(f"--{key}", help=f"same as --set {key}=...")
    parser.add_argument("--fp16", action="store_true", help="fp16 mixed precision (GPU)")
    parser.add_argument("--bf16", action="store_true", help="bf16 mixed precision")
    return parser


def main(argv=None) -> dict:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    args = build_parser().parse_args(argv)
    overrides = list(args.set)
    for key in ("model", "data_dir", "output_dir", "max_steps", "learning_rate", "resume_from_checkpoint",
                "threads", "max_train_examples", "max_eval_examples"):
        if getattr(args, key) is not None:
            overrides.append(f"{key}={getattr(args, key)}")
    if args.fp16:
        overrides.append("fp16=true")
    if args.bf16:
        overrides.append("bf16=true")
    config = load_config(args.config, overrides)
    summary = finetune(config)
    print(json.dumps({k: v for k, v in summary.items() if k != "log_history"}, indent=2))
    return summary


if __name__ == "__main__":
    from pmi_decode.config import run_script

    raise SystemExit(run_script(main))
