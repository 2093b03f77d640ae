#!/usr/bin/env bash
# Developer entry point. Every command installs what it needs (idempotently) first.
#
#   ./x.sh run [adaptor run flags] "PROMPT"   build everything, run a prompt (reference driver by default)
#   ./x.sh test                                fmt check, clippy, build drivers, the whole test suite
#   ./x.sh build-drivers                       build the WASM drivers into $TARGET/drivers
#   ./x.sh bench                               the turn-overhead / compile benchmark (release build)
#
# CARGO_TARGET_DIR is honoured; drivers land in "$CARGO_TARGET_DIR/drivers".
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$ROOT"
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"
export CARGO_TARGET_DIR="$TARGET"
# Built-in drivers: crate name -> installed file name.
DRIVERS=("reference-driver:reference")

ensure_wasm_target() {
  if ! rustup target list --installed 2>/dev/null | grep -qx wasm32-wasip2; then
    echo "x.sh: installing the wasm32-wasip2 target" >&2
    rustup target add wasm32-wasip2 >&2
  fi
}

build_drivers() {
  ensure_wasm_target
  local args=()
  for entry in "${DRIVERS[@]}"; do args+=(-p "${entry%%:*}"); done
  cargo build --profile driver --target wasm32-wasip2 "${args[@]}" >&2
  mkdir -p "$TARGET/drivers"
  for entry in "${DRIVERS[@]}"; do
    local crate="${entry%%:*}" name="${entry##*:}"
    cp "$TARGET/wasm32-wasip2/driver/${crate//-/_}.wasm" "$TARGET/drivers/$name.wasm.tmp"
    mv "$TARGET/drivers/$name.wasm.tmp" "$TARGET/drivers/$name.wasm"
  done
}

build_host() {
  cargo build -p agent-adaptor -p reference-provider >&2
}

cmd="${1:-help}"
shift || true
case "$cmd" in
  run)
    build_drivers
    build_host
    exec "$TARGET/debug/adaptor" run "$@"
    ;;
  test)
    cargo fmt --all --check
    build_drivers
    build_host
    cargo clippy --workspace --all-targets -- -D warnings
    cargo test --workspace "$@"
    ;;
  build-drivers)
    build_drivers
    ;;
  bench)
    build_drivers
    cargo build --release -p agent-adaptor -p reference-provider >&2
    cargo bench -p adaptor-integration-tests --bench turn_overhead
    ;;
  *)
    sed -n '2,9p' "$0"
    exit 2
    ;;
esac
