"""Training features, the collator, the saved input layout, and fine-tuning smoke runs on tiny models."""

import importlib.util
import json
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM, AutoTokenizer

from pmi_decode import PMIDecode, build_inputs, encode_dialogue, encode_response
from pmi_decode.data import load_dialogues
from pmi_decode.training_data import (
    IGNORE_INDEX,
    SPECIAL_TOKENS,
    DialogueCollator,
    InputSpec,
    add_special_tokens,
    build_examples,
    build_features,
    holdout_split,
    load_split,
    load_input_spec,
    save_input_spec,
)
from tiny_models import DIALOGUES, tiny_model, tiny_tokenizer

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("finetune_script", ROOT / "training" / "finetune.py")
_finetune_script = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_finetune_script)
finetune, load_config = _finetune_script.finetune, _finetune_script.load_config

FIX = Path(__file__).parent / "fixtures"


def _tok(kind):
    tok = tiny_tokenizer(kind)
    add_special_tokens(tok, None, SPECIAL_TOKENS)
    return tok


def test_decoder_only_labels_mask_the_prompt():
    tok, spec = _tok("llama"), InputSpec()
    doc, history = DIALOGUES[0]
    feat = build_features(tok, doc, history, "It is in Paris.", is_encoder_decoder=False, spec=spec)
    prompt = encode_dialogue(tok, doc, history, is_encoder_decoder=False, **spec.encode_kwargs()).conditional
    target = encode_response(tok, "It is in Paris.", is_encoder_decoder=False)
    assert feat["input_ids"] == prompt + target
    assert feat["labels"] == [IGNORE_INDEX] * len(prompt) + target
    assert target[-1] == tok.eos_token_id
    assert tok.convert_tokens_to_ids("<knowledge>") in prompt and tok.convert_tokens_to_ids("<agent>") == prompt[-1]


def test_seq2seq_labels_are_the_target():
    tok, spec = _tok("bart"), InputSpec()
    doc, history = DIALOGUES[2]
    feat = build_features(tok, doc, history, "The Beatles.", is_encoder_decoder=True, spec=spec)
    assert feat["input_ids"] == encode_dialogue(tok, doc, history, is_encoder_decoder=True, **spec.encode_kwargs()).conditional
    assert feat["labels"] == tok(text_target="The Beatles.")["input_ids"]
    assert IGNORE_INDEX not in feat["labels"]


def test_target_truncation_keeps_eos():
    tok = _tok("llama")
    spec = InputSpec(max_target_length=5)
    feat = build_features(tok, "d", ["hi"], "a long response with many many tokens", is_encoder_decoder=False, spec=spec)
    labels = [t for t in feat["labels"] if t != IGNORE_INDEX]
    assert len(labels) == 5 and labels[-1] == tok.eos_token_id


def test_history_truncation_keeps_the_last_turn():
    tok, spec = _tok("llama"), InputSpec(max_history_turns=2)
    history = ["first turn", "second turn", "third turn", "Tell me about Paris."]
    text = tok.decode(encode_dialogue(tok, "doc", history, is_encoder_decoder=False, **spec.encode_kwargs()).conditional)
    assert "first" not in text and "second" not in text and "third turn" in text and "Paris" in text
    long_doc = " ".join(["The Eiffel Tower is in Paris."] * 50)
    tight = InputSpec(max_history_turns=None, max_source_length=60)
    enc = encode_dialogue(tok, long_doc, history, is_encoder_decoder=False, **tight.encode_kwargs())
    assert len(enc.conditional) <= 60 and enc.truncated
    assert tok.decode(enc.conditional).rstrip().endswith("<user> Tell me about Paris. <agent>")


@pytest.mark.parametrize("kind,enc_dec,chat", [("bart", True, False), ("llama", False, False), ("llama", False, True)])
def test_a_long_history_never_pushes_the_document_out(kind, enc_dec, chat):
    """The document is cut first, but not below DOCUMENT_FLOOR_SHARE of the room the last turn
    leaves: older turns give way before it is gone (it was, leaving the two prompts the same)."""
    from pmi_decode.inputs import DOCUMENT_FLOOR_SHARE

    tok = tiny_tokenizer(kind, chat=chat) if chat else _tok(kind)
    history = [f"turn {i} about the old mill on the river" for i in range(60)] + ["When was the mill built?"]
    doc = " ".join(["The Alder mill was built in 1791 and rebuilt after the flood of 1852."] * 10)
    for limit in (200, 300, 500):
        enc = encode_dialogue(tok, doc, history, is_encoder_decoder=enc_dec, max_length=limit, chat_template=chat)
        assert len(enc.conditional) <= limit and enc.history_turns_dropped > 0 and enc.document_truncated
        last_only = encode_dialogue(tok, "", history[-1:], is_encoder_decoder=enc_dec, chat_template=chat)
        floor = int((limit - len(last_only.unconditional)) * DOCUMENT_FLOOR_SHARE)
        kept = len(enc.conditional) - len(enc.unconditional)
        assert kept >= max(floor - 8, 10)  # the document's share, less its intro; never pushed out


@pytest.mark.parametrize("kind,enc_dec", [("bart", True), ("llama", False)])
def test_unconditional_is_conditional_minus_document(kind, enc_dec):
    tok, spec = _tok(kind), InputSpec()
    for doc, history in DIALOGUES:
        enc = encode_dialogue(tok, doc, history, is_encoder_decoder=enc_dec, **spec.encode_kwargs())
        cond, uncond = enc.conditional, enc.unconditional
        k = len(cond) - len(uncond)
        cuts = [i for i in range(len(uncond) + 1) if cond[:i] + cond[i + k:] == uncond]
        assert cuts, "the unconditional input is not the conditional one with one span removed"
        removed = tok.decode(cond[cuts[0]: cuts[0] + k])
        assert removed.strip() == f"<knowledge> {doc}"


def test_dataset_leaves_out_records_whose_last_turn_does_not_fit():
    tok = _tok("llama")
    records = [{"id": "ok", "document": "d", "history": ["hi"], "response": "yes"},
               {"id": "long", "document": "d", "history": ["word " * 80], "response": "yes"}]
    data = build_examples(records, tok, is_encoder_decoder=False, spec=InputSpec(max_source_length=40))
    assert len(data) == 1 and data.too_long == ["long"]
    assert data.dataset.column_names == ["input_ids", "labels"]


@pytest.mark.parametrize("kind,enc_dec", [("bart", True), ("llama", False)])
def test_examples_are_built_with_datasets_map_cached_and_in_parallel(kind, enc_dec, tmp_path):
    """datasets.map gives the features build_features gives, alike over two processes, and a
    second build with the same inputs reads the cache file instead of encoding again."""
    tok, spec = _tok(kind), InputSpec(max_source_length=48)
    records = [{"id": f"r{i}", "document": d * (1 + i % 3), "history": h, "response": f"answer {i}"}
               for i, (d, h) in enumerate(DIALOGUES * 3)]
    expected = [build_features(tok, r["document"], r["history"], r["response"], is_encoder_decoder=enc_dec, spec=spec)
                for r in records]
    built = build_examples(records, tok, is_encoder_decoder=enc_dec, spec=spec, cache_dir=tmp_path)
    rows = [dict(row) for row in built.dataset]
    assert rows == [{"input_ids": e["input_ids"], "labels": e["labels"]} for e in expected]
    assert built.num_truncated == sum(e["truncated"] for e in expected) > 0
    two = build_examples(records, tok, is_encoder_decoder=enc_dec, spec=spec, num_proc=2)
    assert [dict(row) for row in two.dataset] == rows
    cached = sorted(tmp_path.glob("examples-*.arrow"))
    assert len(cached) == 1
    stamp = cached[0].stat().st_mtime_ns
    again = build_examples(records, tok, is_encoder_decoder=enc_dec, spec=spec, cache_dir=tmp_path)
    assert [dict(row) for row in again.dataset] == rows and cached[0].stat().st_mtime_ns == stamp
    other = build_examples(records, tok, is_encoder_decoder=enc_dec, spec=InputSpec(max_source_length=40),
                           cache_dir=tmp_path)
    assert len(sorted(tmp_path.glob("examples-*.arrow"))) == 2 and [dict(r) for r in other.dataset] != rows


def test_collator_pads_labels_with_ignore_index():
    tok = _tok("llama")
    feats = [{"input_ids": [5, 6, 7], "labels": [-100, 6, 7]}, {"input_ids": [5], "labels": [5]}]
    batch = DialogueCollator(tok)(feats)
    assert batch["input_ids"].tolist() == [[5, 6, 7], [5, 0, 0]]
    assert batch["labels"].tolist() == [[-100, 6, 7], [5, -100, -100]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [1, 0, 0]]


def test_input_spec_round_trip(tmp_path):
    spec = InputSpec(max_history_turns=3, max_source_length=256)
    save_input_spec(tmp_path, spec)
    assert load_input_spec(tmp_path) == spec
    assert load_input_spec(tmp_path / "nothing") is None
    (tmp_path / "pmi_decode_format.json").write_text('{"max_history": 2}')
    with pytest.raises(ValueError, match="unknown keys"):
        load_input_spec(tmp_path)


def test_config_overrides(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("dataset: topicalchat\nlearning_rate: 6.25e-5\nlora: {r: 8}\n")
    config = load_config(path, ["learning_rate=1e-4", "lora.r=4", "max_steps=7"])
    assert config["learning_rate"] == 1e-4 and config["lora"] == {"r": 4} and config["max_steps"] == 7
    with pytest.raises(ValueError, match="unknown config key 'learning_rat'"):
        load_config(path, ["learning_rat=1"])
    for name in ("faithdial", "multidoc2dial", "topicalchat", "topicalchat_smollm2_lora"):
        cfg = load_config(ROOT / "configs" / f"{name}.yaml")
        assert cfg["dataset"] and cfg["max_history_turns"] == 2
    paper = load_config(ROOT / "configs" / "topicalchat.yaml")
    assert paper["learning_rate"] == 6.25e-5 and paper["warmup_ratio"] == 0.04
    assert paper["per_device_train_batch_size"] * paper["gradient_accumulation_steps"] == 32


def test_holdout_split_is_disjoint_by_conversation():
    records = load_dialogues("topicalchat", "validation", FIX / "topicalchat")
    parts = {p: holdout_split(records, p, key="conversation_id", test=1, eval=0) for p in ("train", "eval", "test")}
    assert parts["eval"] == [] and len(parts["train"]) + len(parts["test"]) == len(records)
    assert {r.meta["conversation_id"] for r in parts["train"]}.isdisjoint({r.meta["conversation_id"] for r in parts["test"]})


def _records():
    records = load_dialogues("topicalchat", "validation", FIX / "topicalchat_postbuild")
    return records[:8], records[8:12]


def _fixed_loss(model, tok, records, enc_dec, spec):
    feats = [build_features(tok, r.document, r.history, r.response, is_encoder_decoder=enc_dec, spec=spec)
             for r in records]
    batch = DialogueCollator(tok)(feats)
    model.eval()
    with torch.no_grad():
        return model(**batch).loss.item()


def _config(tmp_path, **extra):
    config = load_config(None, [])
    config.update(dataset="topicalchat", output_dir=str(tmp_path / "out"), learning_rate=3e-3, max_steps=30,
                  per_device_train_batch_size=4, gradient_accumulation_steps=1, max_source_length=320,
                  max_target_length=48, eval_strategy="no", warmup_ratio=0.0, logging_steps=5, threads=1,
                  training_args={"disable_tqdm": True, "save_strategy": "no"})
    config.update(extra)
    return config


def _decode_with_pmi(out, enc_dec, records):
    cls = AutoModelForSeq2SeqLM if enc_dec else AutoModelForCausalLM
    model, tok = cls.from_pretrained(out), AutoTokenizer.from_pretrained(out)
    spec = load_input_spec(out)
    assert spec is not None and spec.special_tokens == SPECIAL_TOKENS
    inputs = build_inputs(tok, [r.document for r in records], [r.history for r in records], model=model,
                          **spec.encode_kwargs())
    processor = PMIDecode(0.5, 0.9, model=model, unconditional_inputs=inputs["unconditional"])
    seqs = model.generate(**inputs["conditional"], logits_processor=[processor], num_beams=4, max_new_tokens=6,
                          do_sample=False, pad_token_id=tok.pad_token_id)
    assert seqs.shape[0] == len(records)
    return model, tok, spec


@pytest.mark.parametrize("kind", ["bart", "llama"])
def test_finetune_lowers_loss_and_reloads(tmp_path, kind):
    enc_dec = kind == "bart"
    model, tok = tiny_model(kind, dtype=torch.float32), tiny_tokenizer(kind)
    train, evals = _records()
    spec = InputSpec(max_source_length=320, max_target_length=48)
    add_special_tokens(tok, model, SPECIAL_TOKENS)
    before = _fixed_loss(model, tok, train[:4], enc_dec, spec)
    summary = finetune(_config(tmp_path, max_steps=20), model=model, tokenizer=tok, train_records=train,
                       eval_records=evals)
    after = _fixed_loss(model, tok, train[:4], enc_dec, spec)
    assert summary["global_step"] == 20
    print("fixed-batch loss", kind, before, after)
    assert after < before - 0.5, (before, after)
    reloaded, rtok, _ = _decode_with_pmi(summary["output_dir"], enc_dec, evals[:2])
    assert abs(_fixed_loss(reloaded, rtok, train[:4], enc_dec, spec) - after) < 1e-4


def test_finetune_lora_trains_adapter_and_new_tokens(tmp_path):
    model, tok = tiny_model("llama", dtype=torch.float32), tiny_tokenizer("llama")
    train, evals = _records()
    spec = InputSpec(max_source_length=320, max_target_length=48)
    add_special_tokens(tok, model, SPECIAL_TOKENS)
    new_rows = model.get_input_embeddings().weight[-3:].detach().clone()
    before = _fixed_loss(model, tok, train[:4], False, spec)
    config = _config(tmp_path, lora={"r": 8, "alpha": 16, "dropout": 0.0, "target_modules": "all-linear"},
                     learning_rate=3e-2)
    summary = finetune(config, model=model, tokenizer=tok, train_records=train, eval_records=evals)
    out = Path(summary["output_dir"])
    assert (out / "adapter" / "adapter_config.json").is_file()
    merged, rtok, _ = _decode_with_pmi(out, False, evals[:2])
    # a random tiny model moves slowly under a rank-8 adapter; an untrained one stays within 0.01
    assert _fixed_loss(merged, rtok, train[:4], False, spec) < before - 0.08
    assert not torch.allclose(merged.get_input_embeddings().weight[-3:], new_rows)


def test_finetune_early_stopping_checkpoints_and_resume(tmp_path):
    model, tok = tiny_model("llama", dtype=torch.float32), tiny_tokenizer("llama")
    train, evals = _records()
    config = _config(tmp_path, max_steps=6, eval_strategy="steps", eval_steps=3, eval_before_training=True,
                     training_args={"disable_tqdm": True})
    summary = finetune(config, model=model, tokenizer=tok, train_records=train, eval_records=evals)
    out = Path(summary["output_dir"])
    assert (out / "checkpoint-3").is_dir() and (out / "checkpoint-6").is_dir()
    assert summary["eval_loss_after"] < summary["eval_loss_before"]
    model2, tok2 = tiny_model("llama", dtype=torch.float32), tiny_tokenizer("llama")
    resumed = finetune(dict(config, max_steps=9, resume_from_checkpoint=str(out / "checkpoint-6")),
                       model=model2, tokenizer=tok2, train_records=train, eval_records=evals)
    assert resumed["global_step"] == 9
    assert summary["train_loss_from_step"] == 0 and resumed["train_loss_from_step"] == 6
    # resume_from_checkpoint=true takes the newest checkpoint there before training writes its own
    model3, tok3 = tiny_model("llama", dtype=torch.float32), tiny_tokenizer("llama")
    newest = finetune(dict(config, max_steps=12, resume_from_checkpoint=True), model=model3, tokenizer=tok3,
                      train_records=train, eval_records=evals)
    assert newest["global_step"] == 12 and newest["train_loss_from_step"] == 9


def test_early_stopping_stops_when_validation_loss_stalls(tmp_path):
    model, tok = tiny_model("llama", dtype=torch.float32), tiny_tokenizer("llama")
    train, evals = _records()
    config = _config(tmp_path, max_steps=20, learning_rate=0.0, eval_strategy="steps", eval_steps=2,
                     early_stopping_patience=1, training_args={"disable_tqdm": True})
    summary = finetune(config, model=model, tokenizer=tok, train_records=train, eval_records=evals)
    assert summary["global_step"] == 4  # best at step 2, no improvement at step 4


def test_decode_script_writes_scoreable_jsonl_and_resumes(tmp_path):
    import importlib.util

    spec_ = importlib.util.spec_from_file_location("decode_script", ROOT / "eval" / "decode.py")
    script = importlib.util.module_from_spec(spec_)
    spec_.loader.exec_module(script)
    decode, load_decode_config = script.decode, script.load_config
    from pmi_decode.batch.scoring import read_jsonl, score_records

    model, tok = tiny_model("bart", dtype=torch.float32), tiny_tokenizer("bart")
    train, _ = _records()
    summary = finetune(_config(tmp_path, max_steps=2), model=model, tokenizer=tok, train_records=train,
                       eval_records=[])
    config = load_decode_config(ROOT / "configs" / "decode_topicalchat.yaml", [
        f"checkpoint={summary['output_dir']}", f"data_dir={FIX / 'topicalchat_postbuild'}", "split=validation",
        "max_examples=6", "max_new_tokens=5", "batch_size=2", f"output_dir={tmp_path / 'dec'}",
        "pmi_cap=1"])  # any decoding option at the top level applies to every strategy
    written = decode(config)
    assert set(written) == {"beam_search", "beam_sampling"}
    rows = read_jsonl(written["beam_search"])
    assert len(rows) == 6
    assert [r["id"] for r in rows] == [r["id"] for r in script.records_to_decode(config)]  # input order
    for row in rows:
        assert {"id", "document", "history", "response", "pmi_response", "plain_response", "settings"} <= set(row)
        assert row["settings"]["num_beams"] == 4 and row["settings"]["pmi_cap"] == 1.0
    assert read_jsonl(written["beam_sampling"])[0]["settings"]["do_sample"] is True
    scored = score_records(rows, metrics=["unigram_f1"])
    assert "unigram_f1" in json.dumps(scored[0]["scores"]["pmi_response"])
    # a second run finds everything done and appends nothing
    decode(config)
    assert len(read_jsonl(written["beam_search"])) == 6
    for typo, message in (("strategies.beam_search.num_beam=3", "unknown decoding option 'num_beam'.*'num_beams'"),
                          ("strategies.beam_search=4", "must map decoding options to values")):
        with pytest.raises(ValueError, match=message):
            load_decode_config(ROOT / "configs" / "decode_topicalchat.yaml", [typo])


def _conversations(n=12, drop=()):
    from types import SimpleNamespace

    return [SimpleNamespace(id=f"c{c}_{t}", meta={"conversation_id": f"c{c}"}) for c in range(n) if c not in drop
            for t in range(2)]


def test_decoding_takes_the_held_out_conversations_training_saved(tmp_path, monkeypatch):
    """Drawn again from the records another loader setting keeps, the split moved training
    conversations into the test part; the groups saved with the model are taken instead."""
    import pmi_decode.data as data
    from pmi_decode.training_data import load_holdout, save_holdout

    config = dict(_config(tmp_path), holdout={"test": 3, "eval": 2, "seed": 1}, train_split="train",
                  data_dir=str(tmp_path))
    monkeypatch.setattr(data, "load_dialogues", lambda *a, **k: _conversations())
    save_holdout(tmp_path / "run", config)
    trained_on = {r.meta["conversation_id"] for r in load_split(config, "train")}
    monkeypatch.setattr(data, "load_dialogues", lambda *a, **k: _conversations(drop=(0, 2, 5, 7)))  # other filters
    held = load_holdout(tmp_path / "run" / "checkpoint-4")  # a checkpoint folder finds its run's file
    test = {r.meta["conversation_id"] for r in load_split(config, "test", held_out=held)}
    assert test and test <= set(held["test"]) and test.isdisjoint(trained_on)
    redrawn = {r.meta["conversation_id"] for r in load_split(config, "test")}
    assert not redrawn.isdisjoint(trained_on)  # what drawing again would have done


@pytest.mark.parametrize("holdout, message", [
    ({"test": 2, "eval": 1, "sed": 5}, "unknown key 'sed' .*'seed'"),
    ({"test": -1, "eval": 1}, "holdout.test must be a whole number"),
    ({"test": 0.1, "eval": 1}, "holdout.test must be a whole number"),
    ({"test": 1}, "holdout.eval must be a whole number"),
    ({"test": 1, "eval": 1, "key": "dialog_idx"}, "holdout.key 'dialog_idx' is not in the records' meta"),
])
def test_a_bad_holdout_is_refused(tmp_path, monkeypatch, holdout, message):
    import pmi_decode.data as data

    monkeypatch.setattr(data, "load_dialogues", lambda *a, **k: _conversations())
    with pytest.raises(ValueError, match=message):
        load_split(dict(_config(tmp_path), holdout=holdout, train_split="train", data_dir=str(tmp_path)), "train")


def test_cut_and_blank_responses_are_counted_and_duplicate_ids_refused():
    tok, spec = _tok("llama"), InputSpec(max_target_length=5)
    doc, history = DIALOGUES[0]
    rows = [{"id": "a", "document": doc, "history": history, "response": "a long response with many many tokens"},
            {"id": "b", "document": doc, "history": history, "response": "Yes."},
            {"id": "c", "document": doc, "history": history, "response": "   "}]
    examples = build_examples(rows, tok, is_encoder_decoder=False, spec=spec)
    assert len(examples) == 2 and examples.num_responses_cut == 1 and examples.blank_responses == ["c"]
    with pytest.raises(ValueError, match="record ids occur more than once"):
        build_examples(rows + rows[:1], tok, is_encoder_decoder=False, spec=spec)
    for bad in (0, 1, -3, "40"):
        with pytest.raises(ValueError, match="max_target_length must be a whole number >= 2"):
            InputSpec(max_target_length=bad)


def test_a_lora_runs_adapter_folder_decodes_as_its_merged_model(tmp_path):
    """The adapter folder has no tokenizer of its own; loaded on its base, the base needs the rows of
    the run's special tokens first (peft left them out: an IndexError at the first new token)."""
    from pmi_decode.testing import saved_tiny_model

    base = saved_tiny_model(tmp_path / "base", "llama")
    train, evals = _records()
    config = _config(tmp_path, model=base, max_steps=2, lora={"r": 4, "alpha": 8, "dropout": 0.0,
                                                               "target_modules": "all-linear"})
    out = Path(finetune(config, train_records=train, eval_records=evals)["output_dir"])
    spec_ = importlib.util.spec_from_file_location("decode_script", ROOT / "eval" / "decode.py")
    script = importlib.util.module_from_spec(spec_)
    spec_.loader.exec_module(script)
    merged, tok, spec = script.load_checkpoint(str(out))
    adapted, tok2, spec2 = script.load_checkpoint(str(out / "adapter"))
    assert len(tok2) == len(tok) and spec2 == spec
    ids = tok(["<knowledge> a fact <user> hi <agent>"], return_tensors="pt")["input_ids"]
    with torch.no_grad():
        assert torch.allclose(adapted(ids).logits, merged(ids).logits, atol=1e-5)


def test_a_number_yaml_reads_as_a_string_is_taken(tmp_path):
    """YAML 1.1 reads ``learning_rate: 1e-4`` (no decimal point) as the string '1e-4'."""
    path = tmp_path / "c.yaml"
    path.write_text("dataset: topicalchat\nlearning_rate: 1e-4\n")
    config = load_config(path)
    assert config["learning_rate"] == "1e-4"
    _finetune_script.check_config(config)
    assert config["learning_rate"] == 1e-4


@pytest.mark.parametrize("assignment, message", [
    ("learning_rate=abc", "learning_rate must be a number, got 'abc'"),
    ("save_total_limit=abc", "save_total_limit must be a whole number"),
    ("per_device_train_batch_size=abc", "per_device_train_batch_size must be a whole number"),
    ("training_args.bogus=1", r"training_args: \['bogus'\] are not TrainingArguments fields"),
    ("lora=8", "lora must be a mapping"),
    ("max_steps=-5", "max_steps must be -1"),
    ("special_tokens=abc", "special_tokens must be true or false"),
    ("loader_options.bogus=1", r"unknown topicalchat loader option\(s\) \['bogus'\]"),
])
def test_a_bad_config_value_is_named_before_anything_loads(tmp_path, assignment, message):
    config = load_config(ROOT / "configs" / "topicalchat.yaml",
                         [assignment, f"data_dir={FIX / 'topicalchat_postbuild'}", f"output_dir={tmp_path}"])
    with pytest.raises(ValueError, match=message):
        finetune(config, model=object(), tokenizer=object())  # refused before the model is touched


def test_no_example_left_and_no_validation_are_said(tmp_path, caplog):
    model, tok = tiny_model("llama", dtype=torch.float32), tiny_tokenizer("llama")
    train, evals = _records()
    with pytest.raises(ValueError, match="no training examples: all 8 records were left out"):
        finetune(_config(tmp_path, max_source_length=8), model=model, tokenizer=tok, train_records=train,
                 eval_records=evals)
    with caplog.at_level("WARNING"):
        finetune(_config(tmp_path, max_steps=1, eval_strategy="epoch"), model=model, tokenizer=tok,
                 train_records=train, eval_records=[])
    assert "holds no examples: training runs without validation" in caplog.text
