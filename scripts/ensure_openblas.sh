#!/bin/sh
# OpenBLAS for MLX's CPU backend on Linux: float32 matmuls run ~40x faster than on the reference
# BLAS the mlx-cpu wheel bundles. Installs Debian's package when run as root; never fails the build.
[ "$(uname -s)" = Linux ] || exit 0
for lib in /usr/lib/*-linux-gnu/openblas-pthread/libopenblas.so.0; do
  [ -e "$lib" ] && exit 0
done
ldconfig -p 2>/dev/null | grep -q "libopenblas.so.0 " && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing OpenBLAS (libopenblas0-pthread) for MLX's CPU backend"
  apt-get install -y -q libopenblas0-pthread >/dev/null 2>&1 ||
    { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q libopenblas0-pthread >/dev/null 2>&1; } ||
    echo "warning: could not install libopenblas0-pthread; MLX keeps its slow reference BLAS" >&2
else
  echo "note: for fast float32 on this CPU install OpenBLAS" \
    "(Debian/Ubuntu: sudo apt-get install libopenblas0-pthread)" >&2
fi
exit 0
