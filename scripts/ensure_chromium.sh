#!/bin/sh
# Headless Chromium for the browser tests (tests/operations/browser/): Playwright drives Debian's
# package through executable_path, so no browser is ever downloaded. Installs Debian's package
# when run as root; never fails the build (the browser tests then fail and say why).
[ "$(uname -s)" = Linux ] || exit 0
command -v chromium >/dev/null 2>&1 && exit 0
[ -x /usr/bin/chromium ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing Chromium (chromium) for the browser tests"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q --no-install-recommends chromium >/dev/null 2>&1 ||
    { apt-get update -q >/dev/null 2>&1 &&
      apt-get install -y -q --no-install-recommends chromium >/dev/null 2>&1; } ||
    echo "warning: could not install chromium with apt-get; the browser tests will fail" >&2
else
  echo "note: the browser tests need Chromium at /usr/bin/chromium" \
    "(Debian/Ubuntu: sudo apt-get install chromium); not root, so not installing it" >&2
fi
exit 0
