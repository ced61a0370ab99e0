#!/usr/bin/env bash
# Builds the VM image of the kernel-initiator test: Debian bookworm (minbase) with its stock kernel, tgt,
# open-iscsi, rdma-core (Soft-RoCE), fio, and the runtime libraries of our binaries. Run as root.
#
#   tests/vm/build-image.sh OUTDIR [EXTRA-PACKAGE...]
#
# Writes OUTDIR/rootfs.img (ext4, raw), OUTDIR/vmlinuz and OUTDIR/initrd.img, then OUTDIR/ok last (a cache
# entry without it is incomplete). Nothing of the project goes into the image: the build outputs, scripts and
# configs reach the VM at boot through a 9p share (tests/vm/run.sh), so the image only changes when this file
# or the package list does, and run.sh caches it keyed by a hash of both.
# Environment: BLOCKPS_VM_MIRROR (default: the first Debian URI of this machine's apt sources, else
# http://deb.debian.org/debian): Debian's registry is the only one these machines reach.
set -euo pipefail

out=${1:?usage: tests/vm/build-image.sh OUTDIR [EXTRA-PACKAGE...]}
shift
say() { echo "vm-image: [+$((SECONDS))s] $*"; }
die() {
  echo "vm-image: ERROR: $*" >&2
  exit 1
}
[ "$(id -u)" = 0 ] || die "run as root (debootstrap and chroot need it)"
for tool in debootstrap mkfs.ext4; do
  command -v "$tool" >/dev/null || PATH=$PATH:/usr/sbin:/sbin command -v "$tool" >/dev/null ||
    die "$tool not found: apt-get install debootstrap e2fsprogs (scripts/setup.sh installs them)"
done
export PATH=$PATH:/usr/sbin:/sbin

mirror=${BLOCKPS_VM_MIRROR:-}
if [ -z "$mirror" ]; then
  mirror=$(grep -rhoE '^(URIs:|deb)[[:space:]]+https?://[^[:space:]]+/debian/?([[:space:]]|$)' /etc/apt/sources.list \
    /etc/apt/sources.list.d/ 2>/dev/null | awk '{ print $2; exit }' || true)
  mirror=${mirror:-http://deb.debian.org/debian}
fi

# The packages of the guest. Keep it small: every package is download + unpack time on every image rebuild.
packages=(
  linux-image-amd64 kmod udev procps iproute2 util-linux
  tgt open-iscsi
  rdma-core ibverbs-providers ibverbs-utils rdmacm-utils
  fio
  # the plain file-I/O numpy worker of the training issue (python3 + numpy, no PyTorch: it would not fit the time)
  python3-minimal python3-numpy
  "$@"
)
pkglist=$(printf '%s,' "${packages[@]}")
pkglist=${pkglist%,}

mkdir -p "$out"
rm -f "$out/ok"
root=$out/rootfs.tmp
rm -rf "$root"
say "debootstrap bookworm from $mirror (${#packages[@]} packages + dependencies)"
debootstrap --variant=minbase --include="$pkglist" bookworm "$root" "$mirror" >"$out/debootstrap.log" 2>&1 ||
  die "debootstrap failed (last lines of $out/debootstrap.log:
$(tail -n 20 "$out/debootstrap.log"))"

kv=$(ls "$root/usr/lib/modules")
[ "$(wc -w <<<"$kv")" = 1 ] || die "expected one kernel in the image, found: $kv"
say "trim (kernel $kv)"
m=$root/usr/lib/modules/$kv/kernel
# Drivers no VM of ours needs (the VM has virtio disks, 9p, veth and Soft-RoCE only): smaller image, faster mkfs.
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* "$root"/usr/share/{doc,man,locale,info}/* \
  "$m"/sound "$m"/drivers/{gpu,media,iio,usb,bluetooth,hid,staging,net/wireless,net/ethernet,input} \
  "$m"/net/{wireless,mac80211,bluetooth} "$root"/usr/lib/firmware
chroot "$root" depmod -a "$kv"

# PID 1 of the guest. It only mounts what a system needs and the 9p share, then runs the test that run.sh put
# in the share (so the test can change without rebuilding the image) and powers off.
cat >"$root/usr/local/sbin/blockps-vm-init" <<'INIT'
#!/bin/bash
exec >/dev/ttyS0 2>&1
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
mountpoint -q /proc || mount -t proc proc /proc
mountpoint -q /sys || mount -t sysfs sys /sys
mount -t devtmpfs dev /dev 2>/dev/null
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
mount -t tmpfs tmpfs /run
mount -t tmpfs tmpfs /tmp
mount -o remount,rw /
echo "blockps-vm-init: up at $(cut -d' ' -f1 /proc/uptime)s"
modprobe -a 9pnet_virtio 9p
mkdir -p /mnt/blockps
if mount -t 9p -o trans=virtio,version=9p2000.L,msize=524288 blockps /mnt/blockps &&
  [ -x /mnt/blockps/guest-entry ]; then
  /mnt/blockps/guest-entry
  echo "blockps-vm-init: guest-entry exited with $?"
else
  echo "blockps-vm-init: ERROR: no 9p share 'blockps' with an executable guest-entry"
fi
sync
echo "blockps-vm-init: POWEROFF"
echo o >/proc/sysrq-trigger
sleep 30
INIT
chmod 755 "$root/usr/local/sbin/blockps-vm-init"
echo blockps-vm >"$root/etc/hostname"

cp "$root/boot/vmlinuz-$kv" "$out/vmlinuz"
cp "$root/boot/initrd.img-$kv" "$out/initrd.img"
say "mkfs.ext4 -d"
rm -f "$out/rootfs.img"
mkfs.ext4 -q -F -L blockps-vm -d "$root" "$out/rootfs.img" 1536M
rm -rf "$root"
printf '%s\n' "${packages[@]}" >"$out/packages"
touch "$out/ok"
say "done: $out ($(du -sh "$out/rootfs.img" | cut -f1) used of a 1.5G image)"
