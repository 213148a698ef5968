#!/bin/sh
# Builds kernels/ (the CPU kernels: quantized matmul, norms, RoPE, attention for MLX's CPU
# backend) into the virtual environment, against the MLX installed there:
#   sh scripts/build_kernels.sh .venv/bin/python
# Never fails the install: without a compiler the server runs on MLX's own path and says so
# in its log and on /health. The build's output goes to var/kernels-build.log.
set -u
PYTHON="${1:-.venv/bin/python}"
LOG="var/kernels-build.log"
mkdir -p -m 700 var  # owner-only when this makes it, as config/secrets.py makes it
if [ "$(uname -s)" != Linux ]; then
    echo "kernels/: not built on $(uname -s) (MLX's Metal kernels need no help)"
    exit 0
fi
# The venv's own cmake (from PyPI) when the machine has none; pip's build finds it on PATH.
PATH="$(dirname "$PYTHON"):$PATH"
export PATH
started=$(date +%s)
{
    command -v cmake >/dev/null || "$PYTHON" -m pip install -q "cmake>=3.25"
    # nanobind must match the one MLX's Python module was built with (its ABI tag, v22).
    "$PYTHON" -m pip install -q "nanobind==3.1.0" "setuptools>=69" wheel &&
        "$PYTHON" -m pip install --no-build-isolation ./kernels
} >"$LOG" 2>&1
status=$?
if [ $status -eq 0 ]; then
    echo "kernels/: built in $(($(date +%s) - started)) s"
else
    echo "warning: kernels/ did not build (see $LOG); quantized models use MLX's slower path" >&2
fi
exit 0
