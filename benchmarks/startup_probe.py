"""The fixed cost of a run before any decoding: imports, the process group and loading the model.

    OMP_NUM_THREADS=1 python benchmarks/startup_probe.py
    OMP_NUM_THREADS=1 accelerate launch --multi_gpu --num_processes 2 benchmarks/startup_probe.py

Time each from outside (``/usr/bin/time -f %e``); the difference to a full run is decoding.
"""

import pmi_decode.cli  # noqa: F401
from pmi_decode.batch.distributed import process_group
from pmi_decode.models import load_model_and_tokenizer

processes = process_group()
load_model_and_tokenizer("embedded")
processes.wait()
