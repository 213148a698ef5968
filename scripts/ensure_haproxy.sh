#!/bin/sh
# HAProxy for the replica test (tests/operations/test_replicas.py): a real load balancer in front of two
# server instances. Installs Debian's package when run as root and it is missing; prints the
# binary's path (messages go to stderr). The test writes its own config and runs it on loopback.
set -eu

fail() {
  echo "ensure_haproxy: $*" >&2
  exit 1
}

# Debian's haproxy lives in /usr/sbin, which a non-root PATH may leave out.
find_haproxy() {
  command -v haproxy 2>/dev/null && return
  [ -x /usr/sbin/haproxy ] && echo /usr/sbin/haproxy
}

. "$(dirname "$0")/apt_install.sh"
BIN=$(find_haproxy) || true
if [ -z "$BIN" ]; then
  [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 ||
    fail "HAProxy is not installed (Debian/Ubuntu: sudo apt-get install haproxy)"
  echo "installing HAProxy (haproxy) for the test suite" >&2
  # The package's own service is not wanted: the test runs haproxy itself, on loopback ports.
  apt_install haproxy || fail "could not install haproxy with apt-get"
  BIN=$(find_haproxy) || fail "haproxy is installed but its binary was not found"
fi
echo "$BIN"
