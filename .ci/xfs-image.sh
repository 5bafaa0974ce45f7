#!/usr/bin/env bash
# Loop-mounted XFS (reflink, for real RWF_ATOMIC tests) and ext4 images for Keel's tests.
#
#   .ci/xfs-image.sh setup DIR      creates DIR/xfs.img (>= 4 GiB sparse, mkfs.xfs -m reflink=1)
#                                   mounted at DIR/xfs and DIR/ext4.img (256 MiB) mounted at
#                                   DIR/ext4, then prints on stdout:
#                                     export KEEL_XFS_DIR=DIR/xfs KEEL_EXT4_DIR=DIR/ext4
#   .ci/xfs-image.sh teardown DIR   unmounts both and detaches their loop devices (idempotent)
#
# When not root, or loop devices or the file systems are unavailable, setup prints
# "SKIPPED: <reason>" and exits 0 without printing an export line (the tests then print their own
# SKIPPED lines). Installs xfsprogs with apt-get if mkfs.xfs is missing, and fuse3 (for
# tests/power_loss.rs) if fusermount3 is. Progress goes to stderr.
# Why >= 4 GiB: XFS's atomic write unit_max grows with the file system (1 MiB at 1 GiB, 2 MiB from
# 4 GiB); the image is sparse, so it costs only the metadata mkfs writes.
set -euo pipefail

XFS_SIZE=${KEEL_XFS_IMAGE_SIZE:-4G}
EXT4_SIZE=${KEEL_EXT4_IMAGE_SIZE:-256M}

usage() {
  echo "usage: $0 setup DIR | teardown DIR" >&2
  exit 2
}

skip() {
  echo "SKIPPED: XFS/ext4 loop images not set up: $*"
  exit 0
}

log() { echo "xfs-image: $*" >&2; }

detach_image() {
  # Detaches every loop device still backed by image $1 (after a lazy unmount, for example).
  local img=$1 dev
  [ -e "$img" ] || return 0
  for dev in $(losetup -j "$img" -O NAME -n 2>/dev/null || true); do
    losetup -d "$dev" 2>/dev/null || true
  done
}

unmount_dir() {
  local mnt=$1
  if mountpoint -q "$mnt" 2>/dev/null; then
    umount "$mnt" 2>/dev/null || umount -l "$mnt"
  fi
}

teardown() {
  local dir=$1
  for fs in xfs ext4; do
    unmount_dir "$dir/$fs"
    detach_image "$dir/$fs.img"
    rm -f "$dir/$fs.img"
    rmdir "$dir/$fs" 2>/dev/null || true
  done
  log "torn down $dir"
}

# mount_image IMG MNT: attaches IMG to a free loop device and mounts it at MNT. The loop device
# does direct I/O to its backing file when it can (--direct-io=on), so that O_DIRECT writes on the
# image reach the disk instead of the backing file's page cache (benches compare against them).
mount_image() {
  local img=$1 mnt=$2 dev
  mkdir -p "$mnt"
  dev=$(losetup --find --show --direct-io=on "$img" 2>/dev/null) \
    || dev=$(losetup --find --show "$img") || return 1
  if ! mount "$dev" "$mnt"; then
    losetup -d "$dev" || true
    return 1
  fi
  log "mounted $img on $mnt via $dev"
}

setup() {
  local dir=$1
  [ "$(id -u)" = 0 ] || skip "not root (loop mounts need root)"
  command -v losetup >/dev/null || skip "losetup not found"
  if [ ! -e /dev/loop-control ]; then
    modprobe loop 2>/dev/null || true
    [ -e /dev/loop-control ] || skip "no /dev/loop-control (loop devices unavailable)"
  fi
  if ! command -v mkfs.xfs >/dev/null; then
    log "mkfs.xfs missing: installing xfsprogs"
    if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq xfsprogs; } >&2; then
      skip "mkfs.xfs missing and xfsprogs could not be installed"
    fi
  fi
  command -v mkfs.ext4 >/dev/null || skip "mkfs.ext4 not found"
  # The recording disk of tests/power_loss.rs and device_errors.rs mounts a FUSE file through
  # fusermount3 (device_errors.rs also reads extent maps with filefrag, from e2fsprogs). Without
  # it those tests print their own SKIPPED line; the images below do not need it.
  if ! command -v fusermount3 >/dev/null; then
    log "fusermount3 missing: installing fuse3"
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fuse3; } >&2 \
      || log "fuse3 could not be installed: the power-loss tests will print SKIPPED"
  fi
  grep -qw xfs /proc/filesystems || modprobe xfs 2>/dev/null || true
  grep -qw xfs /proc/filesystems || skip "the kernel has no XFS support"

  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  teardown "$dir" 2>/dev/null || true

  truncate -s "$XFS_SIZE" "$dir/xfs.img"
  mkfs.xfs -q -f -m reflink=1 "$dir/xfs.img" >&2 || skip "mkfs.xfs -m reflink=1 failed"
  if ! mount_image "$dir/xfs.img" "$dir/xfs"; then
    teardown "$dir" 2>/dev/null || true
    skip "could not attach or mount the XFS image (no free loop device?)"
  fi

  truncate -s "$EXT4_SIZE" "$dir/ext4.img"
  mkfs.ext4 -q -F "$dir/ext4.img" >&2 || { teardown "$dir" 2>/dev/null || true; skip "mkfs.ext4 failed"; }
  if ! mount_image "$dir/ext4.img" "$dir/ext4"; then
    teardown "$dir" 2>/dev/null || true
    skip "could not attach or mount the ext4 image (no free loop device?)"
  fi

  echo "export KEEL_XFS_DIR=$dir/xfs KEEL_EXT4_DIR=$dir/ext4"
}

[ $# -eq 2 ] || usage
case "$1" in
  setup) setup "$2" ;;
  teardown) teardown "$2" ;;
  *) usage ;;
esac
