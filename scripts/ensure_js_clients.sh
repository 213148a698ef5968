#!/bin/sh
# The Vercel AI SDK for tests/live/test_clients.py: `npm ci` into tests/clients/js (node_modules is
# git-ignored), from its committed package-lock.json, whenever the lock is newer than the
# install. Needs Node.js and npm; installs Debian's nodejs when run as root without them.
# Never fails the build: the JS checks then fail and say why.
set -u
here=$(dirname "$0")
. "$here/apt_install.sh"
js="$here/../tests/clients/js"
if ! command -v npm >/dev/null 2>&1; then
  echo "installing Node.js (nodejs, npm) for the Vercel AI SDK checks" >&2
  { apt_install nodejs && apt_install npm; } ||
    { echo "warning: no npm (Debian/Ubuntu: apt-get install nodejs npm); the JS checks will fail" >&2
      exit 0; }
fi
# npm ci writes node_modules/.package-lock.json last: newer than the lock means up to date.
[ "$js/node_modules/.package-lock.json" -nt "$js/package-lock.json" ] && exit 0
# ai 7 declares node >= 22 but runs on 20 (the checks pass there); the engine check only warns.
(cd "$js" && npm ci --no-audit --no-fund --loglevel=error) ||
  echo "warning: npm ci failed in $js; the JS checks will fail" >&2
exit 0
