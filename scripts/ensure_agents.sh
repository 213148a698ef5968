#!/bin/sh
# The coding agents the end-to-end tests drive against the server (tests/live/test_agents.py,
# scripts/record_agents.py): Claude Code and Codex, pinned, from npm, cached outside the checkout:
#   sh scripts/ensure_agents.sh   ->  prints the folder holding `claude` and `codex`
# Each npm package is a thin wrapper whose real program is a native binary in a per-platform
# optional dependency; an npm that skips optional dependencies or install scripts would leave a
# stub, so the platform package is installed by name when missing and the binaries are linked
# from it directly. About 20 s the first time (two ~120 MB downloads); instant afterwards.
# Test tools, never a runtime dependency of the server.
set -eu
CLAUDE_CODE_VERSION="${CLAUDE_CODE_VERSION:-2.1.328}"
CODEX_VERSION="${CODEX_VERSION:-0.169.0}"
CACHE="${MLX_AGENTS_CACHE:-$HOME/.cache/mlx-agents}"
CC_DIR="$CACHE/claude-code-$CLAUDE_CODE_VERSION"
CX_DIR="$CACHE/codex-$CODEX_VERSION"
BIN="$CACHE/bin-claude-code-$CLAUDE_CODE_VERSION-codex-$CODEX_VERSION"

ready() {
    "$BIN/claude" --version 2>/dev/null | grep -q "^$CLAUDE_CODE_VERSION " &&
        "$BIN/codex" --version 2>/dev/null | grep -q " $CODEX_VERSION\$"
}
if ready; then
    echo "$BIN"
    exit 0
fi
command -v npm >/dev/null 2>&1 || { echo "ensure_agents.sh: npm is needed" >&2; exit 1; }

case "$(uname -s)-$(uname -m)" in
    Linux-x86_64) PLATFORM=linux-x64 ;;
    Linux-aarch64 | Linux-arm64) PLATFORM=linux-arm64 ;;
    Darwin-x86_64) PLATFORM=darwin-x64 ;;
    Darwin-arm64) PLATFORM=darwin-arm64 ;;
    *) echo "ensure_agents.sh: no agent binaries for $(uname -sm)" >&2; exit 1 ;;
esac
# Claude Code has separate builds for musl (Alpine); Codex's Linux build is musl-static anyway.
CC_PLATFORM="$PLATFORM"
if [ "$(uname -s)" = Linux ] && ldd --version 2>&1 | grep -qi musl; then
    CC_PLATFORM="$PLATFORM-musl"
fi

npm_install() {  # DIR SPEC...: quiet, no audit/fund, output to stderr (stdout is the path)
    dir="$1"
    shift
    mkdir -p "$dir"
    npm install --prefix "$dir" --no-audit --no-fund --no-update-notifier \
        --loglevel=error "$@" >&2
}

# Claude Code: the platform package holds the `claude` binary (its postinstall copies it over
# the wrapper's placeholder; linking it directly works whether or not that script ran).
CC_NATIVE="$CC_DIR/node_modules/@anthropic-ai/claude-code-$CC_PLATFORM/claude"
[ -x "$CC_NATIVE" ] || npm_install "$CC_DIR" "@anthropic-ai/claude-code@$CLAUDE_CODE_VERSION"
[ -x "$CC_NATIVE" ] || npm_install "$CC_DIR" \
    "@anthropic-ai/claude-code-$CC_PLATFORM@$CLAUDE_CODE_VERSION"

# Codex: bin/codex.js (run by node) finds the platform package, published as a version tag of
# @openai/codex itself and aliased to @openai/codex-<platform>.
CX_NATIVE_PKG="$CX_DIR/node_modules/@openai/codex-$PLATFORM"
[ -d "$CX_NATIVE_PKG/vendor" ] || npm_install "$CX_DIR" "@openai/codex@$CODEX_VERSION"
[ -d "$CX_NATIVE_PKG/vendor" ] || npm_install "$CX_DIR" \
    "@openai/codex-$PLATFORM@npm:@openai/codex@$CODEX_VERSION-$PLATFORM"

mkdir -p "$BIN"
ln -sf "$CC_NATIVE" "$BIN/claude"
ln -sf "$CX_DIR/node_modules/@openai/codex/bin/codex.js" "$BIN/codex"
if ! ready; then
    echo "ensure_agents.sh: installed, but the agents do not report the pinned versions:" >&2
    "$BIN/claude" --version >&2 || true
    "$BIN/codex" --version >&2 || true
    exit 1
fi
echo "$BIN"
