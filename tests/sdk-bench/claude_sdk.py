"""Benchmark driver: Claude Code through the official Python Agent SDK (claude-agent-sdk).

Run it with the venv that ensure_sdks.sh makes:
    $CLI_CACHE/sdk-python/bin/python claude_sdk.py oneshot <prompt>          one query()
    $CLI_CACHE/sdk-python/bin/python claude_sdk.py session <turns> <prompt>  one ClaudeSDKClient:
        connect, then query() + receive_response() per turn, all in one CLI process

Env: BENCH_CLAUDE_BIN (required) = the pinned `claude` the SDK spawns (cli_path). Everything
else (HOME, ANTHROPIC_BASE_URL, ...) is inherited; the cwd is the workspace. Options are kept
close to `claude -p`: the CLI's default system prompt (the SDK's default is an empty one),
default permission mode and setting sources, no partial messages. By default the SDK also runs
`claude -v` before each connect (version check); CLAUDE_AGENT_SDK_SKIP_VERSION_CHECK=1 skips it.
Output: one line per turn {"turn","ms","first_text_ms","text"}, then {"total_ms","import_ms"}
(ms since this script started, the SDK import included). Any error: message on stderr, exit 1.
"""

import time

T0 = time.perf_counter()

import asyncio  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402


def ms_since(t: float) -> float:
    return (time.perf_counter() - t) * 1000


def out(obj: dict) -> None:
    print(json.dumps(obj), flush=True)


async def run(mode: str, turns: int, prompt: str) -> None:
    import claude_agent_sdk as sdk

    import_ms = ms_since(T0)
    bin_path = os.environ.get("BENCH_CLAUDE_BIN")
    if not bin_path:
        raise RuntimeError("BENCH_CLAUDE_BIN is not set")
    options = sdk.ClaudeAgentOptions(
        cli_path=bin_path,
        cwd=os.getcwd(),
        system_prompt={"type": "preset", "preset": "claude_code"},
    )

    async def turn(i: int, sent: float, messages) -> None:
        """Reads one turn's messages to the end of the stream (query(): the CLI's exit;
        receive_response(): the ResultMessage) and prints the turn's line at its ResultMessage."""
        first_text, done = None, False
        try:
            async for m in messages:
                if isinstance(m, sdk.AssistantMessage) and first_text is None and any(
                    isinstance(b, sdk.TextBlock) for b in m.content
                ):
                    first_text = ms_since(sent)
                elif isinstance(m, sdk.ResultMessage):
                    if m.subtype != "success" or m.is_error:
                        raise RuntimeError(f"turn {i} failed: {m}"[:500])
                    out({"turn": i, "ms": ms_since(sent), "first_text_ms": first_text, "text": m.result})
                    done = True
        finally:
            await messages.aclose()
        if not done:
            raise RuntimeError(f"the CLI ended before the result of turn {i}")

    sent = time.perf_counter()  # turn 1 counts from query() / connect(): it includes the spawn
    if mode == "oneshot":
        await turn(1, sent, sdk.query(prompt=prompt, options=options))
    else:
        client = sdk.ClaudeSDKClient(options=options)
        await client.connect()
        try:
            for i in range(1, turns + 1):
                if i > 1:
                    sent = time.perf_counter()
                await client.query(prompt)
                await turn(i, sent, client.receive_response())
        finally:
            await client.disconnect()
    out({"total_ms": ms_since(T0), "import_ms": import_ms})


def main() -> None:
    args = sys.argv[1:]
    try:
        if len(args) == 2 and args[0] == "oneshot":
            mode, turns, prompt = "oneshot", 1, args[1]
        elif len(args) == 3 and args[0] == "session" and args[1].isdigit() and int(args[1]) >= 1:
            mode, turns, prompt = "session", int(args[1]), args[2]
        else:
            raise RuntimeError("usage: claude_sdk.py oneshot <prompt> | session <turns> <prompt>")
        asyncio.run(run(mode, turns, prompt))
    except Exception as e:  # noqa: BLE001 - any failure is reported and fails the run
        print(f"claude_sdk.py: {type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
