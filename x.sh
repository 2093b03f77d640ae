#!/usr/bin/env bash
# Developer entry point. Every command installs what it needs (idempotently) first.
#
#   ./x.sh run [adaptor run flags] "PROMPT"   build everything, run a prompt (reference driver by default)
#   ./x.sh test                                fmt check, clippy, build drivers, the whole test suite
#   ./x.sh install [--prefix DIR] [--profile release|dev]
#                                              install adaptor, adaptortest, reference-provider and the
#                                              built-in drivers under DIR (default ~/.local)
#   ./x.sh build-drivers                       build the WASM drivers into $TARGET/drivers
#   ./x.sh bench                               turn-overhead / compile, 1000-run load, and official-SDK
#                                              comparison benchmarks (release; installs the CLIs and SDKs)
#   ./x.sh reports                             regenerate the conformance report in each driver README
#   ./x.sh symbol-order                        regenerate cli/symbol-order.txt, the release adaptor's
#                                              function order, from an instrumented build's profile
#
# CARGO_TARGET_DIR is honoured; drivers land in "$CARGO_TARGET_DIR/drivers", the release
# executables (install, bench, symbol-order) in "$CARGO_TARGET_DIR/<host triple>/release"
# (static on Linux with glibc: release_setup).
# `run` and `test` build with one and the same cargo invocation (build_workspace), so they
# share every compiled crate: wasmtime is built once, whichever command comes first.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$ROOT"
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"
export CARGO_TARGET_DIR="$TARGET"
# Drivers: crate name -> installed file name. Built-ins go to $TARGET/drivers (found by the
# host), test-only drivers to $TARGET/test-drivers.
DRIVERS=("reference-driver:reference" "claude-driver:claude" "codex-driver:codex" "acp-driver:acp" "cursor-driver:cursor" "codebuddy-driver:codebuddy")
# Built-ins that reuse another built-in's crate as a library (codebuddy: the Claude driver's
# stream-json mapping) build in a cargo invocation of their own, like the test drivers: in
# one invocation feature unification would switch the library's component export on.
LIBRARY_DRIVERS=("codebuddy-driver:codebuddy")
# The release build (install, bench, symbol-order): one package selection, so one feature
# resolution and the same adaptor executable from each.
RELEASE_PACKAGES=(-p adaptor-cli -p adaptortest -p reference-provider)
TEST_DRIVERS=("testbed-driver:testbed" "broken-driver:broken" "unstable-driver:unstable" "hostile-driver:hostile" "puppet-driver:puppet")

# The release build's target: the host, named explicitly. On Linux with glibc the release
# executables are static (`-C target-feature=+crt-static`, static-pie: no dynamic loader,
# no libc.so to map and relocate at every start; docs/performance.md, "The host's own
# overhead"). The flag goes to the target's rustflags, and `--target` keeps it off the build
# scripts and proc macros, which must stay dynamic. Output: $RELEASE_DIR ($TARGET/<host>/release).
# `--target` also names the crates differently from a plain build (symbol-order.txt names
# this build's functions). Callers pass "${RELEASE_TARGET[@]}" to each release cargo command.
release_setup() {
  local host
  host="$(rustc -vV | sed -n 's/^host: //p')"
  RELEASE_TARGET=(--target "$host")
  RELEASE_DIR="$TARGET/$host/release"
  RELEASE_RUSTFLAGS=""
  case "$host" in
    *-linux-gnu*)
      RELEASE_RUSTFLAGS="-C target-feature=+crt-static"
      local var
      var="CARGO_TARGET_$(tr 'a-z.-' 'A-Z__' <<<"$host")_RUSTFLAGS"
      # Added to what the caller set for this target, not in place of it.
      export "$var=${!var:+${!var} }$RELEASE_RUSTFLAGS" ;;
  esac
  # Cargo lets CARGO_ENCODED_RUSTFLAGS, else RUSTFLAGS, replace the target's rustflags:
  # the caller's flags and ours, both.
  [[ -n "$RELEASE_RUSTFLAGS" ]] || return 0
  if [[ -n "${CARGO_ENCODED_RUSTFLAGS:-}" ]]; then
    export CARGO_ENCODED_RUSTFLAGS="$CARGO_ENCODED_RUSTFLAGS"$'\x1f'"${RELEASE_RUSTFLAGS// /$'\x1f'}"
  elif [[ -n "${RUSTFLAGS:-}" ]]; then
    export RUSTFLAGS="$RUSTFLAGS $RELEASE_RUSTFLAGS"
  fi
}

# The release build itself (after release_setup), one command for install, bench and
# symbol-order; extra arguments go to cargo.
release_build() {
  cargo build --release "${RELEASE_TARGET[@]}" "${RELEASE_PACKAGES[@]}" "$@" >&2
}

# Real agent CLIs for the end-to-end tests, pinned, installed from npm into a cache outside
# the clone (idempotent: nothing is fetched when the pinned version is there).
CLI_CACHE="${ADAPTOR_CLI_CACHE:-$HOME/.cache/agent-adaptor-clis}"
CLAUDE_VERSION="2.1.197"
# The newest published Claude Code, verified beside the oldest supported one: `./x.sh test`
# runs the Claude end-to-end tests (claude_e2e) a second time against it.
CLAUDE_LATEST_VERSION="2.1.332"
CODEX_VERSION="0.171.0"
# ACP agents (drivers/acp): Gemini CLI, Qwen Code (the newest published, 0.24.4, works
# offline), OpenCode.
GEMINI_VERSION="0.61.0"
QWEN_VERSION="0.24.4"
OPENCODE_VERSION="1.18.33"

# Install npm package `$2@$3` into "$CLI_CACHE/$1" unless `$1 --version` already prints the
# pinned version as a word (`2.1.197 (Claude Code)`, `codex-cli 0.171.0`, `0.61.0`); export
# the program's path in the variable named `$4`.
ensure_npm_cli() {
  # An optional fifth argument names the install directory (default: the program's name), so
  # two versions of one CLI can sit side by side.
  local name="$1" package="$2" version="$3" var="$4" dirname="${5:-$1}"
  local dir="$CLI_CACHE/$dirname" bin="$CLI_CACHE/$dirname/node_modules/.bin/$name"
  if [[ " $("$bin" --version 2>/dev/null | head -n 1) " != *" $version "* ]]; then
    echo "x.sh: installing $package@$version into $dir" >&2
    mkdir -p "$dir"
    npm install --prefix "$dir" --no-audit --no-fund --loglevel=error "$package@$version" >&2
  fi
  export "$var=$bin"
}

# CodeBuddy Code is not on the public npm registry, but its SDK package
# (`@tencent-ai/agent-sdk`) carries the CLI (`cli/dist/codebuddy-headless.js`); a
# `codebuddy` wrapper next to it runs that with node. Exported as ADAPTOR_CODEBUDDY_BIN.
CODEBUDDY_SDK_VERSION="0.3.201"
CODEBUDDY_VERSION="2.117.0"
ensure_codebuddy() {
  local dir="$CLI_CACHE/codebuddy-sdk-$CODEBUDDY_SDK_VERSION"
  local bin="$dir/bin/codebuddy"
  if [[ " $("$bin" --version 2>/dev/null | head -n 1) " != *" $CODEBUDDY_VERSION "* ]]; then
    echo "x.sh: installing @tencent-ai/agent-sdk@$CODEBUDDY_SDK_VERSION (CodeBuddy Code $CODEBUDDY_VERSION) into $dir" >&2
    mkdir -p "$dir/bin"
    npm install --prefix "$dir" --no-audit --no-fund --loglevel=error "@tencent-ai/agent-sdk@$CODEBUDDY_SDK_VERSION" >&2
    local node script
    node="$(command -v node)"
    script="$dir/node_modules/@tencent-ai/agent-sdk/cli/dist/codebuddy-headless.js"
    printf '#!/bin/sh\nexec "%s" "%s" "$@"\n' "$node" "$script" > "$bin.tmp"
    chmod 0755 "$bin.tmp"
    mv "$bin.tmp" "$bin"
  fi
  export ADAPTOR_CODEBUDDY_BIN="$bin"
}

ensure_clis() {
  ensure_npm_cli claude @anthropic-ai/claude-code "$CLAUDE_VERSION" ADAPTOR_CLAUDE_BIN
  ensure_npm_cli claude @anthropic-ai/claude-code "$CLAUDE_LATEST_VERSION" ADAPTOR_CLAUDE_LATEST_BIN "claude-$CLAUDE_LATEST_VERSION"
  ensure_npm_cli codex @openai/codex "$CODEX_VERSION" ADAPTOR_CODEX_BIN
  ensure_npm_cli gemini @google/gemini-cli "$GEMINI_VERSION" ADAPTOR_GEMINI_BIN
  ensure_npm_cli qwen @qwen-code/qwen-code "$QWEN_VERSION" ADAPTOR_QWEN_BIN
  ensure_npm_cli opencode opencode-ai "$OPENCODE_VERSION" ADAPTOR_OPENCODE_BIN
  ensure_codebuddy
}

# PostgreSQL server binaries for the PostgreSQL thread-store tests (tests/src/pg.rs starts
# a private cluster from /usr/lib/postgresql/<version>/bin). Installed only when missing.
ensure_postgres() {
  local initdb
  for initdb in /usr/lib/postgresql/*/bin/initdb; do
    [[ -x "$initdb" ]] && return 0
  done
  echo "x.sh: installing Debian's postgresql (server binaries for the store tests)" >&2
  apt_install --no-install-recommends postgresql
}

# apt-get install "$@" (as root, else through sudo).
apt_install() {
  local sudo=()
  [[ "$(id -u)" -eq 0 ]] || sudo=(sudo)
  "${sudo[@]}" apt-get update -qq >&2
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >&2
}

# Debian's Chromium for the web bridge's browser test (tests/tests/integration/web_bridges.rs
# loads the example's page headless). Installed only when missing.
ensure_chromium() {
  [[ -x /usr/bin/chromium ]] && return 0
  echo "x.sh: installing Debian's chromium (the web bridge's browser test)" >&2
  apt_install chromium
}

# playwright-core (pinned), which drives that Chromium from tests/web/page_check.cjs.
PLAYWRIGHT_VERSION="1.64.1"
ensure_playwright() {
  local dir="$CLI_CACHE/playwright"
  if [[ "$(node -p "require('$dir/node_modules/playwright-core/package.json').version" 2>/dev/null)" != "$PLAYWRIGHT_VERSION" ]]; then
    echo "x.sh: installing playwright-core@$PLAYWRIGHT_VERSION into $dir" >&2
    mkdir -p "$dir"
    npm install --prefix "$dir" --no-audit --no-fund --loglevel=error "playwright-core@$PLAYWRIGHT_VERSION" >&2
  fi
  export ADAPTOR_PLAYWRIGHT="$dir/node_modules"
}

ensure_wasm_target() {
  local target
  for target in wasm32-wasip2 wasm32-unknown-unknown; do
    if ! rustup target list --installed 2>/dev/null | grep -qx "$target"; then
      echo "x.sh: installing the $target target" >&2
      rustup target add "$target" >&2
    fi
  done
}

# Build a group of driver crates in cargo profile `$2` and copy each one's component to
# "$1/<name>.wasm". Artifact paths come from cargo's own JSON messages, so two builds of one
# crate with different features never get mixed up.
build_group() {
  local dest="$1" profile="$2"; shift 2
  local args=() entry
  for entry in "$@"; do args+=(-p "${entry%%:*}"); done
  local artifacts
  artifacts="$(cargo build --profile "$profile" --target wasm32-wasip2 "${args[@]}" \
      --message-format=json-render-diagnostics | python3 -c '
import json, sys
for line in sys.stdin:
    try:
        msg = json.loads(line)
    except ValueError:
        continue
    if msg.get("reason") == "compiler-artifact" and "cdylib" in msg["target"]["kind"]:
        for f in msg["filenames"]:
            if f.endswith(".wasm"):
                print(msg["package_id"], msg["target"]["name"], f)
')"
  mkdir -p "$dest"
  for entry in "$@"; do
    local crate="${entry%%:*}" name="${entry##*:}" file
    file="$(awk -v t="${crate//-/_}" '$2 == t { f = $3 } END { print f }' <<<"$artifacts")"
    if [[ -z "$file" ]]; then
      echo "x.sh: no component artifact for $crate" >&2
      exit 1
    fi
    cp "$file" "$dest/$name.wasm.tmp"
    mv "$dest/$name.wasm.tmp" "$dest/$name.wasm"
  done
}

# Driver presets (NAME.preset.json: a built-in driver name for another driver with a base
# config, e.g. `gemini` → acp.wasm with {"agent":"gemini","command":"gemini"}).
PRESETS=(drivers/*/presets/*.preset.json)

build_drivers() {
  ensure_wasm_target
  # Separate invocations: test drivers (and built-ins in LIBRARY_DRIVERS) reuse built-in
  # driver crates as libraries (without their `component` export feature), which one
  # unified build would switch back on. Those builds use the profile `driver-lib` (the same
  # settings, its own directory): a crate with a `cdylib` target gets no hash in its file
  # names, so its two feature sets in one profile would overwrite each other and every
  # `x.sh` command would rebuild both (about 20 s).
  local entry standalone=()
  for entry in "${DRIVERS[@]}"; do
    [[ " ${LIBRARY_DRIVERS[*]} " == *" $entry "* ]] || standalone+=("$entry")
  done
  build_group "$TARGET/drivers" driver "${standalone[@]}"
  build_group "$TARGET/drivers" driver-lib "${LIBRARY_DRIVERS[@]}"
  local preset
  for preset in "${PRESETS[@]}"; do
    cp "$preset" "$TARGET/drivers/$(basename "$preset").tmp"
    mv "$TARGET/drivers/$(basename "$preset").tmp" "$TARGET/drivers/$(basename "$preset")"
  done
  build_group "$TARGET/test-drivers" driver-lib "${TEST_DRIVERS[@]}"
  # The reference driver without WASI (a core module; the loading test turns it into a
  # component) proves that drivers need no WASI at all.
  cargo build --profile driver --target wasm32-unknown-unknown -p reference-driver >&2
}

# The one native build. `run` and `test` both use it: the same package and target selection
# gives the same feature resolution, so nothing (wasmtime above all) is compiled twice. A
# narrower selection (`-p agent-adaptor`) or dropping `--all-targets` would unify other
# features (dev-dependencies, the tests crate's) and rebuild wasmtime — measured: 6 min.
build_workspace() {
  cargo build --workspace --all-targets >&2
}

# Copy the installable files into a prefix: bin/{adaptor,adaptor-host,adaptortest,adaptortest-provider,
# reference-provider} and share/agent-adaptor/drivers/*.wasm (where `adaptor` looks,
# relative to its own bin/). Files are replaced atomically (copy, then rename).
install_into() {
  local prefix="$1" bin_src="$2"
  mkdir -p "$prefix/bin" "$prefix/share/agent-adaptor/drivers"
  local exe
  for exe in adaptor adaptor-host adaptortest adaptortest-provider reference-provider; do
    install -m 0755 "$bin_src/$exe" "$prefix/bin/.$exe.tmp"
    mv "$prefix/bin/.$exe.tmp" "$prefix/bin/$exe"
  done
  local entry name
  for entry in "${DRIVERS[@]}"; do
    name="${entry##*:}"
    install -m 0644 "$TARGET/drivers/$name.wasm" "$prefix/share/agent-adaptor/drivers/.$name.wasm.tmp"
    mv "$prefix/share/agent-adaptor/drivers/.$name.wasm.tmp" "$prefix/share/agent-adaptor/drivers/$name.wasm"
  done
  local preset
  for preset in "${PRESETS[@]}"; do
    name="$(basename "$preset")"
    install -m 0644 "$preset" "$prefix/share/agent-adaptor/drivers/.$name.tmp"
    mv "$prefix/share/agent-adaptor/drivers/.$name.tmp" "$prefix/share/agent-adaptor/drivers/$name"
  done
  echo "x.sh: installed adaptor, adaptortest, reference-provider, ${#DRIVERS[@]} drivers and ${#PRESETS[@]} presets under $prefix" >&2
  case ":$PATH:" in
    *":$prefix/bin:"*) ;;
    *) echo "x.sh: add $prefix/bin to your PATH to run \`adaptor\` from anywhere" >&2 ;;
  esac
}

# The installed layout works from anywhere: a scratch HOME (so no user drivers or config
# count), a working directory outside the clone, a PATH without the build tree. The
# install-time compile (`adaptor drivers`, as `./x.sh install` runs it) fills the compiled
# cache with one entry per installed driver, and the run after it compiles nothing.
install_smoke_test() {
  local scratch
  scratch="$(mktemp -d)"
  install_into "$scratch/prefix" "$TARGET/debug" 2>/dev/null
  mkdir -p "$scratch/home" "$scratch/elsewhere"
  installed() {
    (cd "$scratch/elsewhere" && env -i HOME="$scratch/home" PATH="$scratch/prefix/bin:/usr/bin:/bin" adaptor "$@")
  }
  cache_entries() {
    { find "$scratch/home/.cache/agent-adaptor/compiled" -name '*.cwasm' 2>/dev/null || true; } | wc -l
  }
  local out drivers compiled after
  installed drivers >/dev/null
  drivers="$(find "$scratch/prefix/share/agent-adaptor/drivers" -name '*.wasm' | wc -l)"
  compiled="$(cache_entries)"
  out="$(installed run "installed hello")"
  after="$(cache_entries)"
  rm -rf "$scratch"
  if [[ "$out" != *"Reference reply: installed hello"* ]]; then
    echo "x.sh: the installed adaptor did not answer from outside the clone:" >&2
    echo "$out" >&2
    exit 1
  fi
  if [[ "$compiled" != "$drivers" || "$after" != "$compiled" ]]; then
    echo "x.sh: compiling at install time did not fill the cache: $drivers drivers, $compiled entries after \`adaptor drivers\`, $after after a run" >&2
    exit 1
  fi
  echo "x.sh: the installed adaptor ran a prompt from outside the clone on the drivers compiled at install ($compiled)"
}

cmd="${1:-help}"
shift || true
case "$cmd" in
  run)
    build_drivers
    build_workspace
    exec "$TARGET/debug/adaptor" run "$@"
    ;;
  test)
    cargo fmt --all --check
    ensure_clis
    ensure_postgres
    ensure_chromium
    ensure_playwright
    build_drivers
    build_workspace
    cargo clippy --workspace --all-targets -- -D warnings
    # Embedders pay only for what they use: the runtime without default features carries no
    # CLI, logging front end or database client (cargo tree reads the lock file; no build).
    heavy="$(cargo tree -p agent-adaptor --no-default-features -e normal --prefix none -f '{p}' \
        | grep -E '^(clap|clap_complete|tracing-subscriber|indicatif|toml|rusqlite|libsqlite3-sys|tokio-postgres|rmcp|axum|hyper) ' || true)"
    if [[ -n "$heavy" ]]; then
      echo "x.sh: agent-adaptor --no-default-features still depends on:" >&2
      echo "$heavy" >&2
      exit 1
    fi
    # The bridges' protocol stacks stay out of the runtime, and behind their features.
    bridged="$( (cargo tree -p agent-adaptor -e normal --prefix none -f '{p}' | grep -E '^agent-client-protocol ';
                 cargo tree -p adaptor-bridges --no-default-features -e normal --prefix none -f '{p}' \
                   | grep -E '^(agent-client-protocol|axum) ') || true)"
    if [[ -n "$bridged" ]]; then
      echo "x.sh: a bridge dependency leaked out of its feature:" >&2
      echo "$bridged" >&2
      exit 1
    fi
    cargo test --workspace "$@"
    # The Claude driver on the newest published Claude Code too: the same test binary, already
    # built (`--workspace` keeps the one feature resolution, so nothing is rebuilt); the tests
    # read the version they expect from ADAPTOR_CLAUDE_VERSION.
    if [[ $# -eq 0 ]]; then
      ADAPTOR_CLAUDE_BIN="$ADAPTOR_CLAUDE_LATEST_BIN" ADAPTOR_CLAUDE_VERSION="$CLAUDE_LATEST_VERSION" \
        cargo test --workspace --test integration -- claude_e2e::
    fi
    # The examples must run, not only compile. They run as an application would: in a
    # scratch workspace outside the clone, with the provider on PATH like a real CLI (a PATH
    # entry inside the workspace is never trusted). They were built above with the
    # workspace's features; `cargo run -p` would rebuild wasmtime with another feature set.
    scratch="$(mktemp -d)"
    for example in quickstart streaming approvals threads tools skills worktree profiles; do
      (cd "$scratch" && PATH="$TARGET/debug:$PATH" "$TARGET/debug/examples/$example" >/dev/null)
    done
    rm -rf "$scratch"
    echo "x.sh: examples ran"
    install_smoke_test
    ;;
  install)
    prefix="$HOME/.local" profile=release
    while [[ $# -gt 0 ]]; do
      case "$1" in
        --prefix) prefix="${2:?--prefix needs a directory}"; shift 2 ;;
        --profile) profile="${2:?--profile needs release or dev}"; shift 2 ;;
        *) echo "x.sh install: unknown argument $1 (use --prefix DIR, --profile release|dev)" >&2; exit 2 ;;
      esac
    done
    build_drivers
    case "$profile" in
      release)
        release_setup
        release_build
        python3 cli/symbol-order.py coverage "$RELEASE_DIR/adaptor-host" cli/symbol-order.txt >&2 \
          || echo "x.sh: warning: installing an adaptor laid out in the default order (more resident memory)" >&2
        install_into "$prefix" "$RELEASE_DIR" ;;
      dev)
        build_workspace
        install_into "$prefix" "$TARGET/debug" ;;
      *) echo "x.sh install: --profile must be release or dev" >&2; exit 2 ;;
    esac
    # Compile at install time: listing the drivers loads each one, which fills the compiled
    # cache, so the first run after an install pays no cold compile (≈ 0.2 s per driver).
    if "$prefix/bin/adaptor" drivers >/dev/null; then
      echo "x.sh: compiled the drivers into the cache" >&2
    else
      echo "x.sh: warning: \`adaptor drivers\` failed; drivers compile at their first use" >&2
    fi
    ;;
  build-drivers)
    build_drivers
    ;;
  reports)
    build_drivers
    build_workspace
    for entry in "${DRIVERS[@]}"; do
      crate="${entry%%:*}" name="${entry##*:}"
      dir="drivers/$name"
      report="$("$TARGET/debug/adaptortest" report "$TARGET/drivers/$name.wasm" --cassette "$dir/cassettes")"
      REPORT="$report" python3 - "$dir/README.md" <<'PY'
import os, sys
path = sys.argv[1]
text = open(path).read()
begin, end = "<!-- adaptortest report: begin -->", "<!-- adaptortest report: end -->"
head, rest = text.split(begin, 1)
_, tail = rest.split(end, 1)
open(path, "w").write(head + begin + "\n" + os.environ["REPORT"].rstrip("\n") + "\n" + end + tail)
PY
      echo "x.sh: updated $dir/README.md" >&2
    done
    ;;
  symbol-order)
    # The release adaptor's function order (cli/build.rs): profile an instrumented build
    # on the usual commands. It must be the release build itself, only instrumented: a
    # symbol's hash depends on the profile's settings and on the features cargo resolved
    # (RUSTFLAGS do not enter it), so any other profile or package selection names every
    # function differently and the list would match nothing.
    llvm="$(rustc -vV | sed -n 's/^LLVM version: \([0-9]*\).*/\1/p')"
    command -v "llvm-profdata-$llvm" >/dev/null || apt_install "llvm-$llvm"
    ensure_clis
    build_drivers
    build_workspace
    work="$TARGET/symbol-order"
    release_setup
    # RUSTFLAGS replaces the target's rustflags: the instrumented build names the static
    # build's flags again. With `--target`, RUSTFLAGS reaches no build script or proc macro.
    CARGO_TARGET_DIR="$work/target" RUSTFLAGS="${RUSTFLAGS:-} -Cprofile-generate=$work/unprofiled $RELEASE_RUSTFLAGS" \
      release_build
    python3 cli/symbol-order.py profile "$work/target/${RELEASE_DIR#"$TARGET/"}/adaptor" "$TARGET" "$work/runs" \
      "llvm-profdata-$llvm" cli/symbol-order.txt
    # The optimised build keeps some functions out of line under names the profile lacks:
    # link with the list and add the functions of ours that page-fault, up to three rounds
    # (each is one release link, and each finds about one function per 64 KiB step still
    # mapped outside the block: 175, 93 and 78 the first time), then link the final list.
    command -v perf >/dev/null || apt_install linux-perf
    for round in 1 2 3; do
      release_build
      added="$(python3 cli/symbol-order.py faults "$RELEASE_DIR/adaptor-host" "$TARGET" \
        "$work/runs" cli/symbol-order.txt)"
      [[ "$added" -eq 0 ]] && break
    done
    release_build
    # How many listed functions the final build has, for `coverage` to compare with later.
    python3 cli/symbol-order.py record "$RELEASE_DIR/adaptor-host" cli/symbol-order.txt
    ;;
  bench)
    build_drivers
    release_setup
    release_build
    # The figures must be those of the build that ships: with its function order.
    python3 cli/symbol-order.py coverage "$RELEASE_DIR/adaptor-host" cli/symbol-order.txt >&2
    # All three benches in one build: their link-time-optimised links run side by side. They
    # build for the release's target too, so they sit beside (and run) its adaptor. (Cargo
    # warns that it drops the `cdylib` crate type of the driver crates they link natively: a
    # static glibc target has no shared libraries; the benches use the `rlib`.)
    cargo bench "${RELEASE_TARGET[@]}" -p adaptor-integration-tests --bench turn_overhead --bench load \
      --bench sdk_compare --no-run >&2
    cargo bench "${RELEASE_TARGET[@]}" -p adaptor-integration-tests --bench turn_overhead
    cargo bench "${RELEASE_TARGET[@]}" -p adaptor-integration-tests --bench load
    ensure_clis
    # shellcheck source=tests/sdk-bench/ensure_sdks.sh
    source "$ROOT/tests/sdk-bench/ensure_sdks.sh"
    ensure_sdks
    cargo bench "${RELEASE_TARGET[@]}" -p adaptor-integration-tests --bench sdk_compare
    ;;
  *)
    sed -n '2,14p' "$0"
    exit 2
    ;;
esac
