# Sourced by each pass's run.sh: the environment, the results folder, and `part`, which runs
# one part under its own time limit, logs it, and packs everything so far into $OUT/results.tgz
# (a run stopped part-way keeps what it measured).
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
R=/tmp/gpu_results
mkdir -p "$R" "$OUT"
pack() { tar czf "$OUT/results.tgz" -C "$(dirname "$R")" "$(basename "$R")"; }
part() {  # part NAME SECONDS COMMAND...
    local name=$1 limit=$2; shift 2
    local start=$SECONDS
    echo "== $name (limit ${limit}s)"
    timeout "$limit" "$@" > "$R/$name.log" 2>&1
    echo "rc=$? seconds=$((SECONDS - start))" | tee -a "$R/$name.log" >> "$R/parts.txt"
    tail -n 3 "$R/$name.log"
    pack
}
{ nvidia-smi; python3 -c "import torch, transformers; print(torch.__version__, transformers.__version__, torch.cuda.get_device_name())"; } > "$R/machine.txt" 2>&1
cat "$R/machine.txt"
XDIST=$(python3 -c "import xdist" 2>/dev/null && echo "-n 6")  # parallel where pytest-xdist is installed
