# The official SDKs the SDK benchmark (tests/sdk-bench) compares with, pinned to the pinned CLIs
# and installed into the CLI cache outside the clone. Idempotent: nothing is fetched when the
# pinned versions are there. The SDKs' own copies of the CLIs are left out (npm --omit=optional,
# pip --no-binary): the drivers always pass our pinned CLI (pathToClaudeCodeExecutable, cli_path,
# codexPathOverride), and a run that forgot to would fail instead of using another CLI version.
#
# @anthropic-ai/claude-agent-sdk 0.3.197: its package.json says "claudeCodeVersion": "2.1.197".
SDK_CLAUDE_TS_VERSION="0.3.197"
# @openai/codex-sdk 0.163.0: the newest published (there is no 0.171); it runs
# `codex exec --experimental-json [resume <id>]`, which Codex 0.171.0 still accepts.
SDK_CODEX_TS_VERSION="0.163.0"
# claude-agent-sdk (PyPI) 0.2.110: the newest whose bundled CLI (2.1.191) is not newer than
# 2.1.197 (0.2.111 bundles 2.1.202); no release bundles 2.1.197 itself.
SDK_CLAUDE_PY_VERSION="0.2.110"

# Installs the SDKs unless present; exports BENCH_SDK_NODE_DIR (the npm prefix the .mjs drivers
# import from) and BENCH_SDK_PYTHON (the venv's python, to run claude_sdk.py with). Sourced by
# x.sh, which runs with `set -e`: a version probe that fails (nothing installed yet) must not
# end the script, hence `|| true` on each.
ensure_sdks() {
  local cache="${CLI_CACHE:-$HOME/.cache/agent-adaptor-clis}"
  local node_dir="$cache/sdk-node" py_dir="$cache/sdk-python"
  local have_claude have_codex have_py
  have_claude="$(node -p "require('$node_dir/node_modules/@anthropic-ai/claude-agent-sdk/package.json').version" 2>/dev/null || true)"
  have_codex="$(node -p "require('$node_dir/node_modules/@openai/codex-sdk/package.json').version" 2>/dev/null || true)"
  if [[ "$have_claude" != "$SDK_CLAUDE_TS_VERSION" || "$have_codex" != "$SDK_CODEX_TS_VERSION" ]]; then
    echo "ensure_sdks: installing the TypeScript SDKs into $node_dir" >&2
    mkdir -p "$node_dir"
    npm install --prefix "$node_dir" --no-audit --no-fund --loglevel=error --omit=optional --save-exact \
      "@anthropic-ai/claude-agent-sdk@$SDK_CLAUDE_TS_VERSION" "@openai/codex-sdk@$SDK_CODEX_TS_VERSION" >&2 || return 1
  fi
  have_py="$("$py_dir/bin/python" -c 'import importlib.metadata as m; print(m.version("claude-agent-sdk"))' 2>/dev/null || true)"
  if [[ "$have_py" != "$SDK_CLAUDE_PY_VERSION" ]]; then
    echo "ensure_sdks: installing the Python SDK into $py_dir" >&2
    [[ -x "$py_dir/bin/python" ]] || python3 -m venv "$py_dir" || return 1
    "$py_dir/bin/pip" install --quiet --disable-pip-version-check --no-binary claude-agent-sdk \
      "claude-agent-sdk==$SDK_CLAUDE_PY_VERSION" >&2 || return 1
  fi
  export BENCH_SDK_NODE_DIR="$node_dir" BENCH_SDK_PYTHON="$py_dir/bin/python"
}
