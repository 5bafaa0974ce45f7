#!/usr/bin/env bash
# Fuzz smoke run: builds every fuzz target (libFuzzer, no sanitizer: the targets are safe Rust
# over decoders, and -s none runs them several times faster) and runs each on its committed
# corpus (fuzz/corpus/<target>) for a few seconds. Fails on any crash, panic or timeout.
# cargo-fuzz is installed if missing; the installed stable toolchain builds with
# RUSTC_BOOTSTRAP=1 (libFuzzer needs -Z flags).
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${KEEL_FUZZ_SMOKE_SECS:-8}"
if ! command -v cargo-fuzz >/dev/null 2>&1; then
  echo "installing cargo-fuzz"
  cargo install cargo-fuzz --locked --quiet
fi
cd fuzz
RUSTC_BOOTSTRAP=1 cargo fuzz build -O -s none
bin=target/x86_64-unknown-linux-gnu/release
scratch=$(mktemp -d /tmp/keel-fuzz-smoke.XXXXXX)
trap 'rm -rf "$scratch"' EXIT
for t in $(RUSTC_BOOTSTRAP=1 cargo fuzz list); do
  # New inputs go to a scratch copy, so the committed corpus is read, never changed.
  mkdir -p "$scratch/$t"
  if [ -d "corpus/$t" ]; then cp -r "corpus/$t/." "$scratch/$t/"; else echo "SKIPPED: fuzz/corpus/$t missing (runs from an empty corpus)"; fi
  line=$("$bin/$t" "$scratch/$t" -max_total_time="$secs" -timeout=10 -artifact_prefix="$scratch/$t-" 2>&1 | tee "$scratch/$t.log" | grep -E '^#[0-9]+[[:space:]]+DONE' | tail -1) || {
    echo "fuzz target $t FAILED:"; tail -40 "$scratch/$t.log"; exit 1; }
  echo "fuzz $t: ${line:-no DONE line}"
done
