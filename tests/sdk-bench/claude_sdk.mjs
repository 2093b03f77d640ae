#!/usr/bin/env node
// Benchmark driver: Claude Code through the official TypeScript Agent SDK
// (@anthropic-ai/claude-agent-sdk, installed by ensure_sdks.sh).
//
//   node claude_sdk.mjs oneshot <prompt>          one query() with a string prompt
//   node claude_sdk.mjs session <turns> <prompt>  one query() fed by an async generator
//                                                 (streaming input): <turns> turns in one CLI process
//
// Env: BENCH_CLAUDE_BIN (required) = the pinned `claude` the SDK spawns (pathToClaudeCodeExecutable);
// BENCH_SDK_NODE_DIR (optional) = the npm prefix holding the SDK, default
// ${ADAPTOR_CLI_CACHE:-<passwd home>/.cache/agent-adaptor-clis}/sdk-node ($HOME is the mock's home).
// Everything else (HOME, ANTHROPIC_BASE_URL, ...) is inherited; the cwd is the workspace.
// Options are kept close to `claude -p`: the CLI's default system prompt (the SDK's default is an
// empty one), default permission mode, default setting sources, no partial messages.
// Output: one line per turn {"turn","ms","first_text_ms","text"}, then {"total_ms","import_ms"}
// (ms since this script started). Any error: a message on stderr and exit 1.
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
    throw new Error('usage: claude_sdk.mjs oneshot <prompt> | session <turns> <prompt>');
  const bin = process.env.BENCH_CLAUDE_BIN;
  if (!bin) throw new Error('BENCH_CLAUDE_BIN is not set');
  const cache = process.env.ADAPTOR_CLI_CACHE || join(userInfo().homedir, '.cache/agent-adaptor-clis');
  const dir = process.env.BENCH_SDK_NODE_DIR || join(cache, 'sdk-node');
  const { query } = await import(
    pathToFileURL(join(dir, 'node_modules/@anthropic-ai/claude-agent-sdk/sdk.mjs')).href);
  const importMs = now() - t0;

  const options = {
    pathToClaudeCodeExecutable: bin,
    cwd: process.cwd(),
    systemPrompt: { type: 'preset', preset: 'claude_code' },
  };

  // Turn bookkeeping: `sent` is when the current turn's prompt went to the SDK. In a session the
  // generator yields turn i's prompt, then waits for its result; when it returns, the SDK closes
  // the CLI's stdin and the CLI exits.
  let turn = 1, sent = 0, firstText = null, wake = () => {};
  const resultOf = (i) => new Promise((r) => { wake = r; if (turn > i) r(); });
  async function* input() {
    for (let i = 1; i <= turns; i++) {
      if (i > 1) sent = now(); // turn 1 counts from query(), as in oneshot: it includes the spawn
      yield { type: 'user', message: { role: 'user', content: prompt }, parent_tool_use_id: null };
      await resultOf(i);
    }
  }

  sent = now();
  const q = query({ prompt: mode === 'oneshot' ? prompt : input(), options });
  for await (const m of q) {
    if (m.type === 'assistant' && firstText === null
        && m.message.content.some((c) => c.type === 'text')) {
      firstText = now() - sent;
    } else if (m.type === 'result') {
      if (m.subtype !== 'success' || m.is_error)
        throw new Error(`turn ${turn} failed: ${JSON.stringify(m).slice(0, 500)}`);
      out({ turn, ms: now() - sent, first_text_ms: firstText, text: m.result });
      firstText = null;
      turn++;
      wake();
    }
  }
  if (turn - 1 !== turns) throw new Error(`the CLI ended after ${turn - 1} of ${turns} turns`);
  out({ total_ms: now() - t0, import_ms: importMs });
}

main().catch((e) => {
  process.stderr.write(`claude_sdk.mjs: ${e?.stack || e}\n`);
  process.exit(1);
});
