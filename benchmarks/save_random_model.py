"""Save a random-weight model of a real size, with a real tokenizer, as a folder ``generate`` loads.

    python benchmarks/save_random_model.py --model smollm2-135m --tokenizer TOKENIZER_DIR --output /tmp/model

For end-to-end timing where no trained checkpoint can be copied (the GPU machine takes 64 MiB):
the weights are random (``REAL_SIZES`` in pmi_decode/experiments/benchmarking.py), so the text is
noise, but every tensor has the real shape and the tokenizer, chat template and prompt lengths are
real. The tokenizer folder comes from the embedded model on a machine that has it:

    python -c "from pmi_decode.models import load_model_and_tokenizer as l; l('embedded')[1].save_pretrained('TOKENIZER_DIR')"
"""

from __future__ import annotations

import argparse

from transformers import AutoTokenizer

from pmi_decode.experiments.benchmarking import REAL_SIZES, random_weight_model


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m", choices=list(REAL_SIZES))
    parser.add_argument("--tokenizer", required=True, help="a tokenizer folder whose vocabulary fits the model")
    parser.add_argument("--output", required=True)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--device", default="cpu", help="where the weights are initialised")
    args = parser.parse_args(argv)
    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    model = random_weight_model(args.model, args.device, dtype=args.dtype)
    if len(tokenizer) > model.config.get_text_config().vocab_size:
        raise SystemExit(f"the tokenizer has {len(tokenizer)} tokens, more than {args.model}'s vocabulary")
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    model.save_pretrained(args.output)
    tokenizer.save_pretrained(args.output)
    print(f"saved {args.model} ({sum(p.numel() for p in model.parameters()) / 1e6:.0f}M parameters) to {args.output}")


if __name__ == "__main__":
    main()
