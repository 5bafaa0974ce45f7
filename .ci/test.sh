#!/usr/bin/env bash
# Keel's whole test suite: the README's test command. Sets up loop-mounted XFS (reflink, for real
# RWF_ATOMIC tests) and ext4 images when run as root, runs every test, tears the images down.
# Without root or loop devices the XFS/ext4 tests print "SKIPPED: <reason>" instead.
set -euo pipefail
cd "$(dirname "$0")/.."

images=$(mktemp -d /tmp/keel-test-images.XXXXXX)
cleanup() { bash .ci/xfs-image.sh teardown "$images" >/dev/null 2>&1 || true; rm -rf "$images"; }
trap cleanup EXIT

if exports=$(bash .ci/xfs-image.sh setup "$images"); then
  echo "$exports" | grep -v '^export' || true
  eval "$(echo "$exports" | grep '^export' || true)"
fi
echo "KEEL_XFS_DIR=${KEEL_XFS_DIR:-<unset>} KEEL_EXT4_DIR=${KEEL_EXT4_DIR:-<unset>}"

# Release mode: the crash-test matrices run thousands of cases; optimised code runs them in minutes.
# --nocapture so that every "SKIPPED: <reason>" line a test prints is visible.
log="$images/test.log"
set +e
cargo test --workspace --release "$@" -- --nocapture 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
# The long power-loss matrix (ignored in the run above): rare recovery bugs show up at about one
# case in 10^4-10^5, which the 1,024 cases of the normal run miss. 100,000 cases on 2 threads
# (KEEL_CRASH_THREADS) take about 5 minutes here.
if [ "$status" -eq 0 ] && [ "$#" -eq 0 ]; then
  KEEL_CRASH_CASES="${KEEL_CRASH_CASES:-100000}" \
    cargo test --release -p keel --test crash -- --ignored --nocapture crash_matrix_long 2>&1 | tee -a "$log"
  status=${PIPESTATUS[0]}
fi
# Deterministic concurrency tests of the version store under shuttle (keel-buffer-pool's
# tests/versions_shuttle.rs; ~5 s): a build of its own, `--cfg keel_shuttle` swapping module
# `versions`' mutex and atomics for shuttle's, in its own target dir so that the flag does not
# invalidate the main build's cache. Runs even if the run above failed; counts the same way.
if [ "$#" -eq 0 ]; then
  echo "== shuttle: RUSTFLAGS=\"--cfg keel_shuttle\" cargo test -p keel-buffer-pool --test versions_shuttle"
  RUSTFLAGS="${RUSTFLAGS:-} --cfg keel_shuttle" CARGO_TARGET_DIR=target/shuttle \
    cargo test -p keel-buffer-pool --test versions_shuttle 2>&1 | tee -a "$log"
  shuttle_status=${PIPESTATUS[0]}
  if [ "$status" -eq 0 ]; then status=$shuttle_status; fi
fi
set -e
sum() { grep -E '^test result: ' "$log" | sed -E "s/.* ([0-9]+) $1.*/\1/" | paste -sd+ | bc; }
echo
echo "== SKIPPED lines:"
grep 'SKIPPED:' "$log" || echo "(none)"
echo "tests: $(sum passed) passed, $(sum failed) failed, $(grep -c 'SKIPPED:' "$log" || true) skipped"
exit "$status"
