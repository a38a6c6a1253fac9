"""The fuzz harness: the click tree as data, hostile values, one invocation through the real entry point,
and the checks every invocation must pass.

`invoke` runs `provisioner.cli.main(argv)` (the console script's function, click in standalone mode
off as `provision` runs it) in this process with stdout/stderr captured, a wall-clock alarm and the
process's peak memory read after it. `check` then asserts the contract of docs/threat-model.md: exit 0,
1 (audit/doctor warnings) or 2; a 2 is one `provision: error:` line (or a refused JSON document with
--json); no traceback; no file created or changed outside what the command was told to write; nothing
injected into written or printed text.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import resource
import shlex
import signal
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path

import click

from provisioner.cli import main

CANARY = "PWNED"
# Values that end a line and start another with the canary: if any line of any written or printed text
# begins with it, something was injected.
INJECTIONS = [
    f"x\nRUN {CANARY}", f"x\r{CANARY}", f"x\u2028{CANARY}", f"x\u0085{CANARY}", f"a\n# c\n{CANARY}=1",
    f"x\x00{CANARY}", f"x\\\n{CANARY}", f"x\x0b{CANARY}", f"x\x0c{CANARY}", f"x\x1e{CANARY}", f"x\n{CANARY}",
]
HOSTILE = [
    "", " ", "-", "--", "--json", "../x", "../../../../../etc/passwd", "/dev/zero", "/dev/stdin",
    "١٢٣", "８", "3.١٠", "2.1.0.post١", "1" * 5000, "9." * 2000 + "9", "0-99999999999", "0-" + "9" * 400,
    "{}", "{x}", "%s%n", "*a", "&a x", "!!python/object/apply:os.system ['id']", "null", "~", "nan", "inf",
    "-1", "1e999", "A" * 70000, "é", "\u202e", "x" * 300, f"ok;{CANARY}", f"$({CANARY})", f"`{CANARY}`",
    f"x' {CANARY} '", f'x" {CANARY} "', "\t", "0x10", "+1", "1_000", " 3.10 ", "Ⅻ", "ｘ",
]


def walk(group: click.Group | None = None, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], click.Command]]:
    """Every command of the click tree (sub-groups recursed), so new commands and options are fuzzed too."""
    from provisioner.cli.app import cli

    group = group or cli
    out: list[tuple[tuple[str, ...], click.Command]] = []
    ctx = click.Context(group)
    for name in group.list_commands(ctx):  # the top group registers a command when asked for it
        cmd = group.get_command(ctx, name)
        assert cmd is not None, name
        if isinstance(cmd, click.Group):
            out.append(((*path, name), cmd))
            out.extend(walk(cmd, (*path, name)))
        else:
            out.append(((*path, name), cmd))
    return out


class Hang(Exception):
    pass


@dataclass
class Result:
    argv: list[str]
    rc: int | None
    out: str
    err: str
    seconds: float
    exc: BaseException | None = None
    maxrss_mb: float = 0.0


def invoke(argv: list[str], timeout: int = 60) -> Result:
    """`provision ARGV` in this process (see the module docstring)."""
    out, err = io.StringIO(), io.StringIO()

    def alarm(signum, frame):
        raise Hang(f"no answer within {timeout} s")

    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(timeout)
    start = time.monotonic()
    rc: int | None = None
    exc: BaseException | None = None
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = main(list(argv))
    except SystemExit as e:  # click in standalone mode would exit; main must return instead
        exc = e
    except BaseException as e:  # noqa: BLE001 - every escape is a finding
        exc = e
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    seconds = time.monotonic() - start
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return Result(list(argv), rc, out.getvalue(), err.getvalue(), seconds, exc, maxrss)


# ------------------------------------------------------------------ file-system watch


@dataclass
class Sandbox:
    """base/: work/ is the cwd and the only place outputs go (work/link points at outside/)."""

    base: Path
    work: Path
    outside: Path
    keep: set[str] = field(default_factory=set)

    def snapshot(self) -> dict[str, tuple]:
        snap: dict[str, tuple] = {}
        for top in (self.work, self.outside):
            for dirpath, dirnames, filenames in os.walk(top, followlinks=False):
                for name in dirnames + filenames:
                    p = os.path.join(dirpath, name)
                    try:
                        st = os.lstat(p)
                    except OSError:
                        continue
                    if stat.S_ISREG(st.st_mode):
                        snap[p] = ("f", st.st_size, st.st_mtime_ns)
                    else:
                        snap[p] = (stat.S_IFMT(st.st_mode),)
        return snap


def changed(before: dict, after: dict) -> list[str]:
    return sorted(p for p in set(before) | set(after) if before.get(p) != after.get(p))


# ------------------------------------------------------------------ checks

_LINE_START = re.compile(rf"^\s*(RUN\s+)?{CANARY}", re.M)


def injected(text: str) -> list[str]:
    """Lines (split as Python, the shell, Docker and YAML would split them) that begin with the canary."""
    bad = []
    for line in text.splitlines():
        if _LINE_START.match(line):
            bad.append(line[:80])
    return bad


def one_error_line(res: Result) -> bool:
    lines = res.err.splitlines()
    if len(lines) == 1 and lines[0].startswith("provision: error: "):
        return True
    return solver_refusal(lines)


def solver_refusal(lines: list[str]) -> bool:
    """The resolver's refusal: one `provision: refused:` line, then (by design) the nearest valid stacks, one
    numbered line each, so that a refusal explains itself."""
    if not lines or not lines[0].startswith("provision: refused: ") or len(lines) > 12:
        return False
    rest = [x for x in lines[1:] if x.strip()]
    return not rest or (rest[0] == "Nearest valid stacks:"
                        and all(re.match(r"  [0-9]+\. \S", x) for x in rest[1:]))


def refused_json(res: Result) -> bool:
    try:
        doc = json.loads(res.out)
    except ValueError:
        return False
    return isinstance(doc, dict) and doc.get("status") == "refused" and not res.err.strip()


def check_basic(res: Result, exit_codes: tuple[int, ...] = (0, 2), seconds: float = 60.0, maxrss_mb: float = 4096,
                reports: bool = False) -> None:
    """`reports`: a checking command (audit, doctor, verify) whose exit 2 may be a finished report of errors
    on stdout with nothing on stderr."""
    assert res.exc is None, f"{res.argv!r} raised {type(res.exc).__name__}: {res.exc}"
    assert "Traceback" not in res.out + res.err, f"{res.argv!r}: traceback\n{res.err[-2000:]}"
    assert res.rc in exit_codes, f"{res.argv!r}: exit {res.rc}\n{res.err[-500:]}"
    if res.rc == 2:
        report = reports and res.out.strip() and not res.err.strip()
        assert report or one_error_line(res) or refused_json(res), \
            f"{res.argv!r}: exit 2 without one error line: {res.err[-600:]!r}"
    assert res.seconds < seconds, f"{res.argv!r}: took {res.seconds:.1f} s"
    assert res.maxrss_mb < maxrss_mb, f"{res.argv!r}: peak memory {res.maxrss_mb:.0f} MiB"
    assert not injected(res.out) and not injected(res.err), f"{res.argv!r}: injected line in output"


def shell_argv(text: str) -> list[str]:
    """A printed `docker run` read back as sh reads it: comments dropped, backslash-newline joined."""
    body = "\n".join(line for line in text.split("\n") if not line.startswith("#"))
    return shlex.split(body.replace("\\\n", ""))


def files_under(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    return [p for p in path.rglob("*") if p.is_file()] if path.is_dir() else []
