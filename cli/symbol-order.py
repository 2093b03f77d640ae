#!/usr/bin/env python3
"""Regenerate cli/symbol-order.txt (run by `./x.sh symbol-order`).

The release `adaptor-host` (the whole command; `adaptor` is its launcher) is linked with the
functions listed in cli/symbol-order.txt first and together (see cli/build.rs). Both modes
run an `adaptor-host` through the usual commands — runs on
the reference driver (plain, `--json`, a thread's two turns), on Claude Code and Codex
against the project's mocks, the driver list. The drivers' cold compile is left out: the
compiled cache is filled by an unwatched pass first, as `./x.sh install` does, so the
compiler's functions do not join the block a run touches.

  symbol-order.py profile ADAPTOR TARGET_DIR WORK_DIR LLVM_PROFDATA OUTPUT
      ADAPTOR is built with `-C profile-generate`: merge its counts with `llvm-profdata` and
      write every function that ran, most-run first.
  symbol-order.py faults ADAPTOR TARGET_DIR WORK_DIR OUTPUT
      ADAPTOR is the release build linked with OUTPUT: record its page faults (`perf record
      -e page-faults -d`) and append every function of its own code that faulted and is not
      listed — the profile misses functions the optimised build keeps out of line under
      another name. Prints how many it added (0: nothing left to add).

  symbol-order.py record ADAPTOR OUTPUT
      ADAPTOR is the release build linked with OUTPUT's final list: write into OUTPUT's
      header how many of its functions that build has (`# matched N`).
  symbol-order.py coverage ADAPTOR OUTPUT
      How many of OUTPUT's functions the release build ADAPTOR has, against the recorded
      count; fails (exit 1) below 95 % of it: the names no longer match the build (another
      feature resolution or profile setting, a renamed crate) and the order mostly does
      nothing until the list is regenerated. Run by `./x.sh install` (a warning) and
      `./x.sh bench` (an error: the figures would not be those of the shipped build).

TARGET_DIR holds drivers/ and debug/ (mock-serve, reference-provider); WORK_DIR is scratch;
the CLIs come from ADAPTOR_CLAUDE_BIN and ADAPTOR_CODEX_BIN. Any command that fails stops the
script, and the list is only replaced whole.
"""

import json
import os
import re
import shutil
import subprocess
import sys

HEADER = "# The release adaptor's function order (cli/build.rs); `./x.sh symbol-order` writes it.\n"


def run_commands(adaptor, target, work, wrap):
    """Run the usual commands through `adaptor`, each as `wrap(args, env)` returns it."""
    claude, codex = os.environ["ADAPTOR_CLAUDE_BIN"], os.environ["ADAPTOR_CODEX_BIN"]
    ws = os.path.join(work, "ws")
    os.makedirs(ws)
    base = {
        "PATH": os.path.join(target, "debug") + os.pathsep + os.environ["PATH"],
        "HOME": os.path.join(work, "home"),
        "XDG_CACHE_HOME": os.path.join(work, "cache"),
        "XDG_CONFIG_HOME": os.path.join(work, "config"),
        "XDG_DATA_HOME": os.path.join(work, "data"),
        "ADAPTOR_DRIVER_PATH": os.path.join(target, "drivers"),
        "LLVM_PROFILE_FILE": os.path.join(work, "unwatched", "%p.profraw"),
    }
    os.makedirs(base["HOME"])

    def adaptor_cmd(args, watched=True):
        env = dict(base)
        command = [adaptor, *args]
        if watched:
            command = wrap(command, env)
        done = subprocess.run(command, env=env, cwd=ws, capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"symbol-order: `{' '.join(command)}` failed ({done.returncode}):\n{done.stderr}")

    mocks = []

    def mock(kind, cli):
        home = os.path.join(work, f"mock-{kind}")
        proc = subprocess.Popen(
            [os.path.join(target, "debug", "mock-serve"), kind, "--home", home],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ws,
        )
        mocks.append(proc)
        proc.stdout.readline()  # the base URL
        env = json.loads(proc.stdout.readline())[cli]
        os.makedirs(env.get("TMPDIR", home), exist_ok=True)
        return [a for k, v in env.items() for a in ("--env", f"{k}={v}")]

    try:
        claude_env = mock("anthropic", "claude")
        codex_env = mock("openai", "codex")
        runs = [
            ["run", "Say hello"],
            ["run", "--json", "Say hello"],
            ["run", "--thread", "symbol-order", "First turn"],
            ["run", "--thread", "symbol-order", "Second turn"],
            ["run", "--driver", "claude", "--config", json.dumps({"command": claude}),
             *claude_env, "Say hello"],
            ["run", "--driver", "codex", "--config", json.dumps({"command": codex}),
             *codex_env, "Say hello"],
            ["drivers"],
        ]
        adaptor_cmd(["drivers"], watched=False)  # compiles every driver into the cache
        for _ in range(3):
            for args in runs:
                adaptor_cmd(args)
    finally:
        for proc in mocks:
            proc.stdin.close()
            proc.wait()


MATCHED = "# matched "
# Below this share of the recorded count, `coverage` fails.
COVERAGE_FLOOR = 0.95


def write_list(names, output, matched=None):
    # Symbol hashes change with the compiler: cli/build.rs compares this line with its own.
    rustc = subprocess.run(["rustc", "-V"], check=True, capture_output=True, text=True).stdout
    tmp = output + ".tmp"
    with open(tmp, "w") as f:
        f.write(HEADER)
        f.write(f"# {rustc.strip()}\n")
        if matched is not None:
            f.write(f"{MATCHED}{matched} functions of the release build it was written for\n")
        f.write("".join(n + "\n" for n in names))
    os.replace(tmp, output)


def read_list(output):
    """The listed names and the recorded match count (None when not recorded)."""
    names, recorded = [], None
    with open(output) as f:
        for line in f:
            line = line.rstrip("\n")
            if line.startswith(MATCHED):
                recorded = int(line[len(MATCHED):].split()[0])
            elif line and not line.startswith("#"):
                names.append(line)
    return names, recorded


def matched(adaptor, names):
    """How many of `names` the executable `adaptor` defines."""
    nm = subprocess.run(["nm", "--defined-only", adaptor], check=True, capture_output=True,
                        text=True).stdout
    defined = {fields[2] for fields in (l.split() for l in nm.splitlines()) if len(fields) == 3}
    return sum(1 for n in names if n in defined)


def record(adaptor, output):
    names, _ = read_list(output)
    write_list(names, output, matched(adaptor, names))


def coverage(adaptor, output):
    names, recorded = read_list(output)
    found = matched(adaptor, names)
    print(f"cli/symbol-order.txt: {found} of its {len(names)} functions are in this build"
          + (f" ({recorded} when it was written)" if recorded is not None else ""))
    if recorded is not None and found < COVERAGE_FLOOR * recorded:
        sys.exit("cli/symbol-order.txt no longer names this build's functions (another feature "
                 "resolution, profile setting or dependency renamed them), so the release adaptor "
                 "is laid out mostly in the default order: run ./x.sh symbol-order")


def profile(adaptor, target, work, profdata, output):
    profiles = os.path.join(work, "profiles")
    os.makedirs(profiles)

    def wrap(command, env):
        env["LLVM_PROFILE_FILE"] = os.path.join(profiles, "%p-%m.profraw")
        return command

    run_commands(adaptor, target, work, wrap)
    raw = sorted(os.path.join(profiles, f) for f in os.listdir(profiles))
    if not raw:
        sys.exit("symbol-order: the instrumented adaptor wrote no profile")
    merged = os.path.join(work, "merged.profdata")
    subprocess.run([profdata, "merge", "-o", merged, *raw], check=True)
    shown = subprocess.run(
        [profdata, "show", "--all-functions", "--counts", merged],
        check=True, capture_output=True, text=True,
    ).stdout
    counts = {}
    name = None
    for line in shown.splitlines():
        head = re.match(r"^  (\S.*):$", line)
        if head:
            # Local functions carry their file before a `;` (or `:`); symbols have neither.
            name = re.split(r"[;:]", head.group(1))[-1]
            continue
        blocks = re.match(r"^    Block counts: \[(.*)\]$", line)
        if blocks and name:
            # How often its blocks ran, all together: zero for a function that never ran.
            ran = sum(int(c) for c in blocks.group(1).split(",") if c.strip())
            if ran > 0:
                counts[name] = counts.get(name, 0) + ran
    if len(counts) < 1000:
        sys.exit(f"symbol-order: only {len(counts)} functions ran; the profile looks broken")
    write_list(sorted(counts, key=lambda n: (-counts[n], n)), output)
    print(f"symbol-order: {len(counts)} functions ran; wrote {output}", file=sys.stderr)


def faults(adaptor, target, work, output):
    adaptor = os.path.realpath(adaptor)
    records = os.path.join(work, "faults")
    os.makedirs(records)
    count = [0]

    def wrap(command, env):
        count[0] += 1
        data = os.path.join(records, f"{count[0]}.data")
        return ["perf", "record", "-q", "-e", "page-faults", "-c", "1", "-d", "-o", data, "--", *command]

    run_commands(adaptor, target, work, wrap)
    listed, _ = read_list(output)
    known = set(listed)
    added = []
    for data in sorted(os.listdir(records)):
        script = subprocess.run(
            ["perf", "script", "-i", os.path.join(records, data), "-F", "ip,addr,sym,dso",
             "--no-demangle"],
            check=True, capture_output=True, text=True,
        ).stdout
        for line in script.splitlines():
            # `ADDR ADDR-SYM (ADDR-DSO) IP SYM (DSO)`: an instruction fetch when the faulting
            # address is the instruction pointer.
            fields = line.split()
            if len(fields) != 6 or fields[0] != fields[3] or fields[5] != f"({adaptor})":
                continue
            sym = fields[4]
            if sym not in known and not sym.startswith("["):
                known.add(sym)
                added.append(sym)
    if added:
        write_list(listed + added, output)
    print(f"symbol-order: {len(added)} functions faulted outside the list; added them",
          file=sys.stderr)
    print(len(added))


def main():
    mode, args = (sys.argv[1], sys.argv[2:]) if len(sys.argv) > 1 else ("", [])
    if mode in ("record", "coverage") and len(args) == 2:
        (record if mode == "record" else coverage)(*args)
        return
    if (mode, len(args)) not in (("profile", 5), ("faults", 4)):
        sys.exit(__doc__)
    work = args[2]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    (profile if mode == "profile" else faults)(*args)


if __name__ == "__main__":
    main()
