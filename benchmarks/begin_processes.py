"""eval/begin.py as one process and as N gloo processes on the same config: are the per-row
score caches and the report the same, and how long does each take (interpreter start and model
loading included)?

    python benchmarks/begin_processes.py --config configs/begin_scale_check.yaml \
        --data-dir ../shared/data/begin --processes 2 --output docs/results/begin_scale_out/processes.json

Paths are relative to the repository root (the runs start there). Each run gets a fresh cache
folder under ``--work-dir``; the caches are compared byte for byte,
the reports without their ``config`` entry (which names the folders).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _run(config, data_dir, folder: Path, processes: int) -> dict:
    shown = folder.relative_to(ROOT) if folder.is_relative_to(ROOT) else folder
    begin = ["eval/begin.py", "--config", config, "--cache-dir", str(shown / "cache"),
             "--output-dir", str(shown / "out")]
    if data_dir:
        begin += ["--data-dir", data_dir]
    if processes == 1:
        cmd = [sys.executable, *begin]
    else:
        cmd = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", str(processes),
               "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
               "--main_process_port", str(_free_port()), *begin]
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="")
    started = time.time()
    run = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=ROOT)
    seconds = time.time() - started
    if run.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{run.stderr[-3000:]}")
    return {"command": "OMP_NUM_THREADS=1 python " + " ".join(cmd[1:]), "seconds": round(seconds, 1),
            "load_average": os.getloadavg()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", required=True)
    parser.add_argument("--data-dir")
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--work-dir", default=".cache/begin_processes")
    parser.add_argument("--output", required=True)
    args = parser.parse_args()
    if args.processes < 2:
        raise SystemExit(f"--processes must be >= 2 (it is compared with one process), got {args.processes}")
    work = ROOT / args.work_dir
    shutil.rmtree(work, ignore_errors=True)
    runs = {}
    for count in (1, args.processes):
        runs[count] = _run(args.config, args.data_dir, work / f"p{count}", count)
    caches = {count: {p.name: p.read_bytes() for p in sorted((work / f"p{count}" / "cache").glob("*.jsonl"))}
              for count in runs}
    reports = {count: json.loads((work / f"p{count}" / "out" / "begin_results.json").read_text()) for count in runs}
    for report in reports.values():
        report.pop("config")
    one, many = caches[1], caches[args.processes]
    rows = {name: sum(1 for line in data.splitlines() if line.strip()) for name, data in one.items()}
    result = {
        "meta": {"machine": platform.platform(), "cpus": os.cpu_count(), "python": sys.version.split()[0]},
        "config": args.config,
        "runs": {str(k): v for k, v in runs.items()},
        "rows_per_cache": rows,
        "caches_identical": one == many,
        "cache_files_differing": sorted(n for n in one.keys() | many.keys() if one.get(n) != many.get(n)),
        "reports_identical": reports[1] == reports[args.processes],
        "metrics": {name: {k: r[k] for k in ("auroc", "spearman", "f1")} for name, r in reports[1]["metrics"].items()
                    if "error" not in r},
    }
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "meta"}, indent=2))


if __name__ == "__main__":
    main()
