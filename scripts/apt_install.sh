# Sourced by the ensure_*.sh scripts: `apt_install PACKAGE` installs a Debian package when run
# as root, retrying once after `apt-get update` (a fresh machine has no package lists yet).
# Returns non-zero when it cannot (not root, no apt-get, or the install failed); apt's output
# goes to stderr, where the scripts' messages go.
apt_install() {
  [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 || return 1
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q --no-install-recommends "$1" >&2 ||
    { apt-get update -q >&2 && apt-get install -y -q --no-install-recommends "$1" >&2; }
}
