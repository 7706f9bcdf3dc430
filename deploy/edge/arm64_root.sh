#!/usr/bin/env bash
# Build a 64-bit Debian (bookworm, arm64) root in ROOT with Debian's own packages and install
# the SuperNode side of fedtext there from PyPI's aarch64 wheels, to run under qemu-user
# emulation on an x86_64 machine (deploy/edge/arm64_round.sh then runs one round with it).
#
# usage (as root): deploy/edge/arm64_root.sh ROOT
# Needs: debootstrap, qemu-user-static, binfmt-support (installed here from Debian's packages
# when missing) and a binfmt_misc mount (mounted here when missing). Takes ~30-60 min on
# 2 cores: debootstrap's second stage and pip run emulated. Emulated time is no device time.
set -euo pipefail
ROOT=${1:?usage: $0 ROOT}
REPO=$(cd "$(dirname "$0")/../.." && pwd)
MIRROR=${MIRROR:-http://deb.debian.org/debian}
for tool in debootstrap qemu-aarch64-static update-binfmts; do
  command -v "$tool" >/dev/null || { DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
    debootstrap qemu-user-static binfmt-support >/dev/null; break; }
done
[ -e /proc/sys/fs/binfmt_misc/register ] || mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
update-binfmts --enable qemu-aarch64 2>/dev/null || true
grep -q enabled /proc/sys/fs/binfmt_misc/qemu-aarch64 || { echo "qemu-aarch64 binfmt not enabled" >&2; exit 1; }
if [ ! -x "$ROOT/usr/bin/python3" ]; then
  debootstrap --arch=arm64 --variant=minbase \
    --include=python3,python3-venv,python3-pip,ca-certificates,procps bookworm "$ROOT" "$MIRROR"
fi
cp /etc/resolv.conf "$ROOT/etc/resolv.conf"
# a machine whose TLS passes a proxy with its own CA (this one does): the root trusts what the host trusts
if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
  mkdir -p "$ROOT/usr/local/share/ca-certificates"
  cp /usr/local/share/ca-certificates/*.crt "$ROOT/usr/local/share/ca-certificates/"
  chroot "$ROOT" update-ca-certificates >/dev/null
fi
mkdir -p "$ROOT/opt/fedtext/src"
# this checkout's files as they are (tracked and not ignored), not only what is committed
(cd "$REPO" && git ls-files -z --cached --others --exclude-standard | xargs -0 tar -c --ignore-failed-read) \
  | tar -x -C "$ROOT/opt/fedtext/src"
in_root() { chroot "$ROOT" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
  PIP_CERT=/etc/ssl/certs/ca-certificates.crt PIP_DISABLE_PIP_VERSION_CHECK=1 "$@"; }
mountpoint -q "$ROOT/proc" || mount -t proc proc "$ROOT/proc"
trap 'umount "$ROOT/proc" 2>/dev/null || true' EXIT
[ -x "$ROOT/opt/fedtext/venv/bin/pip" ] || in_root python3 -m venv /opt/fedtext/venv
in_root /opt/fedtext/venv/bin/pip install -q --upgrade pip
in_root /opt/fedtext/venv/bin/pip install -q -r /opt/fedtext/src/deploy/edge/requirements.txt
in_root /opt/fedtext/venv/bin/pip install -q --no-deps /opt/fedtext/src
in_root /opt/fedtext/venv/bin/python -c "import platform, torch, flwr, fedtext; \
print('arm64 root ready:', platform.machine(), 'torch', torch.__version__, 'flwr', flwr.__version__)"
