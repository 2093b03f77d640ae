#!/usr/bin/env node
// Benchmark driver: Codex through the official TypeScript SDK (@openai/codex-sdk, installed by
// ensure_sdks.sh). The SDK runs `codex exec --experimental-json` once per turn (later turns:
// `... resume <thread id>`), so a "session" is one Thread whose turns are separate processes.
//
//   node codex_sdk.mjs oneshot <prompt>          startThread() + one run
//   node codex_sdk.mjs session <turns> <prompt>  one startThread(), <turns> sequential runs
//
// A run is thread.runStreamed(), which is what thread.run() does inside (run() only collects the
// events); streaming gives the time of the first agent message too.
// Env: BENCH_CODEX_BIN (required) = the codex the SDK spawns (codexPathOverride: the npm shim or
// the native binary); BENCH_SDK_NODE_DIR (optional) = the npm prefix holding the SDK, default
// ${ADAPTOR_CLI_CACHE:-<passwd home>/.cache/agent-adaptor-clis}/sdk-node ($HOME is the mock's home).
// Everything else (CODEX_HOME, HOME, MOCK_API_KEY, ...) is inherited; the cwd is the workspace
// (not a git repository: skipGitRepoCheck). Output: one line per turn
// {"turn","ms","first_text_ms","text"}, then {"total_ms","import_ms"} (ms since this script
// started). Any error: a message on stderr and exit 1.
const t0 = performance.now();
import { userInfo } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

const now = () => performance.now();
const out = (o) => process.stdout.write(JSON.stringify(o) + '\n');

async function main() {
  const [mode, a, b] = process.argv.slice(2);
  const turns = mode === 'session' ? Number(a) : 1;
  const prompt = mode === 'session' ? b : a;
  if (!['oneshot', 'session'].includes(mode) || !(turns >= 1) || prompt === undefined)
    throw new Error('usage: codex_sdk.mjs oneshot <prompt> | session <turns> <prompt>');
  const bin = process.env.BENCH_CODEX_BIN;
  if (!bin) throw new Error('BENCH_CODEX_BIN is not set');
  const cache = process.env.ADAPTOR_CLI_CACHE || join(userInfo().homedir, '.cache/agent-adaptor-clis');
  const dir = process.env.BENCH_SDK_NODE_DIR || join(cache, 'sdk-node');
  const { Codex } = await import(
    pathToFileURL(join(dir, 'node_modules/@openai/codex-sdk/dist/index.js')).href);
  const importMs = now() - t0;

  const thread = new Codex({ codexPathOverride: bin }).startThread({ skipGitRepoCheck: true });
  for (let turn = 1; turn <= turns; turn++) {
    const sent = now();
    let firstText = null, text = '', completed = false;
    const { events } = await thread.runStreamed(prompt);
    for await (const e of events) {
      if (e.type === 'item.completed' && e.item.type === 'agent_message') {
        if (firstText === null) firstText = now() - sent;
        text = e.item.text;
      } else if (e.type === 'turn.completed') {
        completed = true;
      } else if (e.type === 'turn.failed' || e.type === 'error') {
        throw new Error(`turn ${turn} failed: ${JSON.stringify(e).slice(0, 500)}`);
      }
    }
    if (!completed) throw new Error(`turn ${turn} ended without turn.completed`);
    out({ turn, ms: now() - sent, first_text_ms: firstText, text });
  }
  out({ total_ms: now() - t0, import_ms: importMs });
}

main().catch((e) => {
  process.stderr.write(`codex_sdk.mjs: ${e?.stack || e}\n`);
  process.exit(1);
});
