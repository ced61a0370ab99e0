#!/usr/bin/env bash
# The one place that installs what blockps needs (idempotent; run as root on Debian bookworm).
#   scripts/setup.sh [BUILD_DIR]     BUILD_DIR defaults to ./build; tgt's source is unpacked into BUILD_DIR/tgt-src
#   scripts/setup.sh -h | --help     this text (nothing is installed)
# It installs the Debian packages, adds a deb-src entry so `apt-get source tgt` works, fetches tgt's source
# (the module needs tgt's internal headers) and checks that it is the same version as the installed tgtd.
# The package list and the deb-src suites are bookworm's: on another release it stops and says so, unless
# BLOCKPS_SETUP_ANY_RELEASE=1 (then it tries, and the package names or tgt's version may not match).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
blockps_prog=setup
# shellcheck source=scripts/lib/messages.sh
. "$repo/scripts/lib/messages.sh"
case ${1:-} in
  -h | --help) usage 0 ;;
  -*) blockps_die_status=2 die "unknown option '$1' (usage: scripts/setup.sh [BUILD_DIR]; --help)" ;;
esac
[ "$#" -le 1 ] || blockps_die_status=2 die "one BUILD_DIR at most (got $#: $*)"
build_dir=$(realpath -m "${1:-$repo/build}")
tgt_src_dir="$build_dir/tgt-src"

[ "$(id -u)" = 0 ] || die "run as root (it installs Debian packages and creates /usr/lib/tgt/backing-store)"
command -v apt-get >/dev/null || die "this needs Debian bookworm (apt-get not found)"
release=$(. /etc/os-release 2>/dev/null && echo "${ID:-?} ${VERSION_CODENAME:-?}") || release="unknown"
if [ "$release" != "debian bookworm" ] && [ "${BLOCKPS_SETUP_ANY_RELEASE:-}" != 1 ]; then
  die "this machine is '$release' (/etc/os-release), not Debian bookworm: the package list and tgt's source" \
    "suites are bookworm's. Set BLOCKPS_SETUP_ANY_RELEASE=1 to try anyway"
fi

packages=(
  # build
  build-essential cmake pkg-config dpkg-dev
  # tgt and initiators
  tgt libiscsi-dev libiscsi-bin open-iscsi qemu-utils qemu-block-extra qemu-system-common fuse3
  # I/O engines and RDMA
  fio libaio-dev liburing-dev rdma-core libibverbs-dev librdmacm-dev
  # C++ libraries
  libtomlplusplus-dev libcli11-dev nlohmann-json3-dev zlib1g-dev
  # the exporter's HTTP server (blockps exporter), and the Prometheus server its test scrapes it with
  libcpp-httplib-dev prometheus
  googletest libgtest-dev
  # tests: network namespaces, process tools
  iproute2 procps psmisc
  # lint of the shell scripts (a test)
  shellcheck
  # the libFuzzer targets with AddressSanitizer and UndefinedBehaviorSanitizer (tests/fuzz/run.sh)
  clang libclang-rt-14-dev
  # the kernel-path test in a VM (tests/vm/run.sh): the Debian image and QEMU's TCG emulator
  debootstrap qemu-system-x86 e2fsprogs
  # bench/client_pushpull and bench/cluster compare against PyTorch's gloo allreduce (bench/gloo_allreduce.py,
  # /usr/bin/python3); bench/cluster measures its link ceiling with iperf3
  iperf3 python3-torch
  # the Python binding (client/python) and the main job (scripts/demo.sh): Fashion-MNIST with PyTorch, its plot
  pybind11-dev python3-dev python3-numpy python3-matplotlib dataset-fashion-mnist
  # `demo.sh --model resnet18` and bench/cluster --workload train (torchvision's ResNet-18); `pip install
  # client/python` offline into a venv (its test)
  python3-torchvision python3-pip python3-venv python3-setuptools python3-wheel
  # the Python unit tests of the binding's pure modules (tests/unit/python)
  python3-pytest
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

# deb-src for the suites that carry tgt (a security or point update may be the installed one).
src_list=/etc/apt/sources.list.d/blockps-deb-src.sources
need_update=
if [ ! -f "$src_list" ]; then
  say "adding deb-src entry $src_list"
  cat >"$src_list" <<'SRC'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb-src
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
  need_update=1
fi
[ ${#missing[@]} -eq 0 ] || need_update=1
installed_tgt=$(dpkg-query -W -f='${Version}' tgt 2>/dev/null || true)
[ -n "$installed_tgt" ] && [ "$(cat "$tgt_src_dir/.version" 2>/dev/null)" = "$installed_tgt" ] || need_update=1

if [ -n "$need_update" ]; then
  say "apt-get update"
  apt-get update -q -o DPkg::Lock::Timeout=600 >/dev/null || die "apt-get update failed"
fi
if [ ${#missing[@]} -gt 0 ]; then
  say "installing: ${missing[*]}"
  # A policy-rc.d that says "no" keeps package scripts from starting daemons (tgt, iscsid): our tests and
  # scripts start their own, on their own ports.
  own_policy=
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
    chmod 755 /usr/sbin/policy-rc.d
    own_policy=1
  fi
  rc=0
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends -o DPkg::Lock::Timeout=600 \
    "${missing[@]}" || rc=$?
  [ -z "$own_policy" ] || rm -f /usr/sbin/policy-rc.d
  [ "$rc" = 0 ] || die "apt-get install failed (exit $rc)"
fi

mkdir -p /usr/lib/tgt/backing-store

# tgt's source, matching the installed tgtd exactly (the module uses tgt's internal struct layouts).
installed=$(dpkg-query -W -f='${Version}' tgt)
stamp="$tgt_src_dir/.version"
if [ "$(cat "$stamp" 2>/dev/null)" != "$installed" ]; then
  say "fetching tgt source $installed into $tgt_src_dir"
  rm -rf "$tgt_src_dir"; mkdir -p "$tgt_src_dir"
  (cd "$tgt_src_dir" && apt-get source -q --download-only "tgt=$installed" >/dev/null) ||
    die "apt-get source tgt=$installed failed: the deb-src entry in $src_list must reach the suite that carries the installed tgt"
  dsc=$(ls "$tgt_src_dir"/tgt_*.dsc)
  (cd "$tgt_src_dir" && dpkg-source --no-check -x "$dsc" src >/dev/null) || die "unpacking $dsc failed"
  src_version=$(cd "$tgt_src_dir/src" && dpkg-parsechangelog -S Version)
  [ "$src_version" = "$installed" ] ||
    die "tgt source version $src_version differs from the installed tgtd $installed; the module would not match tgtd's structs"
  echo "$installed" >"$stamp"
fi
src_version=$(cd "$tgt_src_dir/src" && dpkg-parsechangelog -S Version)
[ "$src_version" = "$installed" ] ||
  die "tgt source in $tgt_src_dir is $src_version but the installed tgtd is $installed: delete $tgt_src_dir and rerun"
[ -f "$tgt_src_dir/src/usr/tgtd.h" ] || die "tgt source in $tgt_src_dir/src has no usr/tgtd.h"
say "ok: packages installed, tgt $installed source in $tgt_src_dir/src, /usr/lib/tgt/backing-store present"
