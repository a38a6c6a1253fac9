import json
import subprocess
import sys

import pytest


def run(*args, env=None):
    return subprocess.run([sys.executable, "-m", "provisioner.cli", *args], capture_output=True, text=True, env=env)


def test_resolve_json_schema():
    proc = run("resolve", "--card", "300T-A2", "--arch", "aarch64", "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["schema"] == "provision.resolve/1" and out["status"] == "ok"
    stack = out["stack"]
    assert stack["schema"] == "provision.stack/1"
    for key in ["card", "chip", "task", "arch", "os", "python", "framework", "cann", "base_image", "driver", "torch",
                "torch_npu", "mindspore", "apex", "extras", "dtype", "id", "explain", "warnings", "sources"]:
        assert key in stack, key
    assert stack["arch"] == "aarch64" and stack["torch"]["requirement"] == "torch==2.12.0"


def test_refusal_exit_code_and_json():
    proc = run("resolve", "--card", "800T-A2", "--torch", "2.1.0", "--cann", "9.1.0", "--json")
    assert proc.returncode == 2
    out = json.loads(proc.stdout)
    assert out["status"] == "refused" and out["reasons"] and out["alternatives"]
    assert all("relaxed" in a for a in out["alternatives"])


def test_refusal_text_names_reason_and_alternatives():
    proc = run("resolve", "--profile", "seed-300ta2-kylin-lora")
    assert proc.returncode == 2
    assert proc.stderr.startswith("provision: refused: torch_npu 2.1.0.post1")
    assert "Known-good fix for this report: profile a2-torch2.1-lora-deepspeed" in proc.stderr
    assert "Nearest valid stacks:" in proc.stderr


@pytest.mark.parametrize("args, phrase", [
    (["resolve", "--card", "nope"], "unknown card 'nope'"),
    (["resolve", "--card", "800T-A2", "--with", "flash"], "unknown --with 'flash'"),
    (["resolve"], "--card is required"),
    (["resolve", "--card", "800T-A2", "--dtype", "int4"], "Invalid value for '--dtype'"),
    (["resolve", "--profile", "nope"], "unknown profile 'nope'"),
    (["matrix", "--section", "gpus"], "unknown section 'gpus'"),
])
def test_bad_input_is_one_line_exit_2(args, phrase):
    proc = run(*args)
    assert proc.returncode == 2
    assert proc.stderr.startswith("provision: error: ") and proc.stderr.count("\n") == 1, proc.stderr
    assert phrase in proc.stderr and "Traceback" not in proc.stderr


def test_matrix_table_and_json():
    proc = run("matrix", "--card", "800-9000")
    assert proc.returncode == 0 and "800-9000" in proc.stdout and "torch_npu" in proc.stdout
    proc = run("matrix", "--card", "300I-Pro", "--section", "cards", "--json")
    out = json.loads(proc.stdout)
    assert out["schema"] == "provision.matrix/1" and out["family"] == "310p"
    assert {c["id"] for c in out["sections"]["cards"]} == {"300I-Pro", "300I-Duo"}


HEAVY = ("docker", "jinja2", "torch", "yaml")
PROBE = (
    "import sys, json\n"
    "from provisioner.cli import main\n"
    "code = main(sys.argv[1:])\n"
    f"heavy = sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r}))\n"
    "print(json.dumps(heavy), file=sys.stderr)\n"
)


@pytest.mark.parametrize("args", [["--help"], ["resolve", "--card", "300T-A2", "--json"]])
def test_cli_start_imports_nothing_heavy(args, tmp_path):
    env = {"PROVISION_CACHE": str(tmp_path), "PATH": "/usr/bin:/bin"}
    for _ in range(2):  # second run is the warm one users see every day
        proc = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, env=env)
    heavy = json.loads(proc.stderr.strip().splitlines()[-1])
    assert not [h for h in heavy if h != "yaml"], heavy
    assert "yaml" not in heavy  # the warm matrix comes from the JSON cache


def test_lazy_command_table_is_what_the_modules_register():
    """app.COMMANDS names every command each module registers, and nothing else: `provision --help` lists them
    all without importing one."""
    import importlib

    import click

    from provisioner.cli import app

    made: dict[str, str] = {}
    for module in sorted(set(app.COMMANDS.values())):
        group = click.Group()
        importlib.import_module(f"provisioner.cli.{module}").register(group)
        made.update({name: module for name in group.commands})
    assert made == app.COMMANDS
    ctx = click.Context(app.cli)
    assert app.cli.list_commands(ctx) == sorted(made)
    assert app.cli.get_command(ctx, "no-such-command") is None


def test_a_command_imports_only_its_own_module(tmp_path):
    """`provision launch` (its --help here) imports launch_cmds and what it uses, not the other command modules."""
    probe = ("import sys\nfrom provisioner.cli import main\nmain(['launch', '--help'])\n"
             "print(sorted(m for m in sys.modules if m.startswith('provisioner.cli.') and m.endswith('_cmds')),"
             " file=sys.stderr)\n")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          env={"PROVISION_CACHE": str(tmp_path), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    loaded = proc.stderr.strip().splitlines()[-1]
    # launch's options come from device_cmds (the host and launch option decorators)
    assert loaded == "['provisioner.cli.device_cmds', 'provisioner.cli.launch_cmds']", loaded


FAST_CASES = [
    ["resolve", "--card", "300T-A2"],
    ["resolve", "--card", "300T-A2", "--json", "--arch", "aarch64"],
    ["resolve", "--card=800T-A2", "--with", "apex", "--with=deepspeed", "--json"],
    ["resolve", "--profile", "a2-torch2.1-lora-deepspeed", "--arch", "x86_64"],
    ["resolve", "--card", "800T-A2", "--torch", "2.1.0", "--cann", "9.1.0", "--json"],  # refused: click path
    ["resolve", "--card", "800T-A2", "--dtype", "int4"],  # bad choice: click path
    ["resolve", "--card", "800T-A2", "--card", "300T-A2"],  # repeated: click path
    ["resolve", "--help"],
]


@pytest.mark.parametrize("args", FAST_CASES)
def test_fast_path_prints_what_click_prints(args, capsys):
    from provisioner.cli import app, main

    fast_code = main(list(args))
    fast = capsys.readouterr()
    click_code = app.run(list(args))
    slow = capsys.readouterr()
    assert (fast_code, fast.out, fast.err) == (click_code, slow.out, slow.err)


def given(values: dict | None) -> dict | None:
    """The values a parse took from the command line (defaults left out)."""
    if values is None:
        return None
    return {k: v for k, v in values.items() if v not in (None, (), False) or k == "as_json"}


def test_fast_path_parses_like_click():
    from provisioner.cli.fast import RESOLVE_OPTS, parse

    assert given(parse(["--card", "300T-A2", "--with", "apex", "--with=deepspeed", "--json"], RESOLVE_OPTS)) == {
        "as_json": True, "card": "300T-A2", "extras": ("apex", "deepspeed")}
    assert given(parse(["--matrix", "a.yaml", "--matrix=b.yaml", "--os", "ubuntu22.04"], RESOLVE_OPTS)) == {
        "as_json": False, "overlays": ("a.yaml", "b.yaml"), "os_": "ubuntu22.04"}
    for doubtful in (["--card"], ["-h"], ["--nope", "x"], ["--task", "bogus"], ["--card", "-x"], ["x"]):
        assert parse(doubtful, RESOLVE_OPTS) is None, doubtful


# -- the launch fast path: click's values for every command line it takes -----------------------------


def _click_launch(argv: list[str]) -> dict | None:
    """click's own reading of `provision launch ARGV` (None where click refuses it)."""
    import click

    from provisioner.cli.launch_cmds import launch_cmd

    try:
        return launch_cmd.make_context("launch", list(argv)).params
    except click.ClickException:
        return None


REQUIRED = ["--card", "300T-A2", "--devices", "0-1", "--image", "img:1"]
LAUNCH_LINES = [
    REQUIRED,
    [*REQUIRED, "-e", "A=1", "--env", "B", "-v", "/d:/d:ro", "--volume=/m:/m", "-w", "/w", "--script", "/b/x.py",
     "--", "--config", "-x", "y"],
    [*REQUIRED, "--nnodes", "2", "--node-rank=1", "--master-addr", "10.0.0.1", "--master-port", "29501", "--json"],
    [*REQUIRED, "--check", "--keep", "--no-init", "--stop-timeout", "5", "--mode", "devices", "--matrix", "o.yaml",
     "--label", "a=b", "--label", "c=d", "--root", "/h", "--dev-root=/h/dev", "--driver-mount", "whole", "--"],
    [*REQUIRED, "--job", "job.yaml", "--dry-run", "--task", "train", "--shm-size", "16g", "--rank-table", "r.json"],
    [*REQUIRED, "--job", "job.yaml", "--dry-run", "--stack", "stack.json", "--json"],
]
NOT_FAST = [
    REQUIRED[:-2],  # no --image: click says so
    [*REQUIRED, "--help"], [*REQUIRED, "-h"],
    [*REQUIRED, "--nnodes", "0"], [*REQUIRED, "--master-port", "70000"], [*REQUIRED, "--stop-timeout", "+5"],
    [*REQUIRED, "--mode", "both"], [*REQUIRED, "--check=yes"], [*REQUIRED, "--keep", "--keep"],
    [*REQUIRED, "--name", "a", "--name", "b"], [*REQUIRED, "-eA=1"], [*REQUIRED, "-e"], [*REQUIRED, "--name", "-x"],
    [*REQUIRED, "train.yaml"], [*REQUIRED, "--nope"],
]


@pytest.mark.parametrize("argv", LAUNCH_LINES)
def test_launch_fast_path_reads_what_click_reads(argv):
    from provisioner.cli.fast import LAUNCH_OPTS, parse

    fast = parse(argv, LAUNCH_OPTS, rest="args")
    assert fast is not None and fast == _click_launch(argv)


@pytest.mark.parametrize("argv", NOT_FAST)
def test_launch_fast_path_leaves_any_doubt_to_click(argv):
    from provisioner.cli.fast import LAUNCH_OPTS, parse

    assert parse(argv, LAUNCH_OPTS, rest="args") is None


@pytest.mark.parametrize("extra", [
    ["--image", "bad image"],  # a refused value: the library's one line
    ["--image", "img:1", "--dry-run"],
    ["--image", "img:1", "--stack", "s.json"],  # --stack goes with --job --dry-run
    ["--image", "img:1", "--job", "j.yaml", "--", "x"],
    ["--image", "img:1", "--nnodes", "2"],  # multi-node without --master-addr
    ["--image", "img:1"],  # no engine at DOCKER_HOST
])
def test_launch_fast_path_fails_as_the_click_command_does(extra, capsys, monkeypatch, tmp_path):
    from provisioner.cli import app, main
    from provisioner.cli.fast import LAUNCH_OPTS, parse

    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/none.sock")
    argv = ["launch", "--card", "300T-A2", "--devices", "0-1", *extra]
    assert parse(argv[1:], LAUNCH_OPTS, rest="args") is not None  # the fast path takes it
    fast = (main(list(argv)), *capsys.readouterr())
    slow = (app.run(list(argv)), *capsys.readouterr())
    assert fast == slow and fast[0] == 2 and fast[2].startswith("provision: error: "), fast


def test_launch_fast_path_imports_no_click(tmp_path):
    probe = ("import sys, json\nfrom provisioner.cli import main\ncode = main(sys.argv[1:])\n"
             "print(code, json.dumps(sorted({m.split('.')[0] for m in sys.modules} & {'click', 'docker', 'http'})),"
             " file=sys.stderr)\n")
    proc = subprocess.run([sys.executable, "-c", probe, "launch", *REQUIRED, "--", "lr=1"], capture_output=True,
                          text=True, env={"PROVISION_CACHE": str(tmp_path), "PATH": "/usr/bin:/bin",
                                          "DOCKER_HOST": f"unix://{tmp_path}/none.sock"})
    assert proc.stderr.startswith("provision: error: provision launch needs a running Docker engine"), proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == "2 []"  # neither click, docker-py nor http.client


def test_launch_fast_path_agrees_with_click_on_random_command_lines():
    """Lines made from the options table, valid and not: the fast path either declines or reads what click reads,
    and it takes every line that is plainly valid (each option once, good values, required ones given)."""
    import random

    from provisioner.cli.fast import LAUNCH_OPTS, parse

    rng = random.Random(16)
    bad_values = ["0", "70000", "-1", "+5", "both", "-x", " 7"]
    taken = 0
    for _ in range(500):
        chosen = rng.sample(LAUNCH_OPTS, rng.randint(0, 14))
        chosen += [o for o in LAUNCH_OPTS if o.required and o not in chosen]
        clean = True
        if rng.random() < 0.1:
            chosen.remove(rng.choice([o for o in chosen if o.required]))
            clean = False
        if rng.random() < 0.1:
            chosen.append(rng.choice(chosen))
            clean = chosen[-1].multiple and clean
        rng.shuffle(chosen)
        argv: list[str] = []
        for opt in chosen:
            flag = opt.short if opt.short and rng.random() < 0.5 else opt.flag
            if opt.kind == "flag":
                argv.append(flag)
                continue
            if rng.random() < 0.85:
                value = rng.choice(opt.choices) if opt.choices else (
                    str(rng.randint(opt.low or 0, opt.high or 99)) if opt.kind == "int" else rng.choice(["x", "a=b", ""]))
            else:
                value = rng.choice(bad_values)
                clean = clean and not value.startswith("-") and opt.kind in ("text", "path") and not opt.choices
            argv += [f"{flag}={value}"] if flag.startswith("--") and rng.random() < 0.3 else [flag, value]
        if rng.random() < 0.5:
            argv += ["--", *rng.sample(["x", "--config", "-y", "a=b", "--"], 3)]
        fast = parse(argv, LAUNCH_OPTS, rest="args")
        slow = _click_launch(argv)
        if fast is not None:
            taken += 1
            assert fast == slow, argv
        else:
            assert not clean, " ".join(map(repr, argv))
    assert taken > 200, taken


# -- the version -------------------------------------------------------------------------------


def _metadata_version() -> str:
    from importlib import metadata

    return metadata.version("provisioner")


@pytest.mark.parametrize("args", [["--version"], ["-V"], ["--version", "resolve"]])
def test_version_prints_the_installed_version_and_exits_0(args):
    proc = run(*args)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, f"provision {_metadata_version()}\n", "")


def test_version_fast_path_imports_no_click(tmp_path):
    probe = ("import sys, json\nfrom provisioner.cli import main\ncode = main(sys.argv[1:])\n"
             "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules} & {'click', 'importlib', 'email'})),"
             " file=sys.stderr)\n")
    proc = subprocess.run([sys.executable, "-c", probe, "--version"], capture_output=True, text=True,
                          env={"PROVISION_CACHE": str(tmp_path), "PATH": "/usr/bin:/bin"})
    assert proc.stdout == f"provision {_metadata_version()}\n"
    loaded = json.loads(proc.stderr.strip().splitlines()[-1])
    assert "click" not in loaded and "email" not in loaded, loaded  # neither click nor importlib.metadata


def test_version_reads_the_dist_info_as_importlib_metadata_does(tmp_path, monkeypatch):
    from provisioner import version as v

    monkeypatch.setattr(v, "_cached", None)
    assert v.version() == _metadata_version()
    # Two installs on the path: the first entry wins, as for importlib.metadata.
    for where, ver in (("a", "7.0.1"), ("b", "7.0.2")):
        info = tmp_path / where / f"provisioner-{ver}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: provisioner\nVersion: {ver}\n\nVersion: no\n")
    monkeypatch.setattr(sys, "path", [str(tmp_path / "nowhere"), str(tmp_path / "b"), str(tmp_path / "a")])
    assert v._from_dist_info() == "7.0.2"
    # Two in one place is ambiguous: importlib.metadata decides.
    (tmp_path / "b" / "provisioner-7.0.3.dist-info").mkdir()
    assert v._from_dist_info() is None


def _json_docs(tmp_path) -> list[tuple[list[str], int]]:
    from tests.helpers import hosts

    host = hosts.materialize("plan-300ta2-4", tmp_path / "host")
    on_host = ["--root", str(host.root), "--dev-root", str(host.dev_root)]
    return [
        (["resolve", "--card", "300T-A2", "--json"], 0),  # the fast path
        (["resolve", "--card", "800T-A2", "--torch", "2.1.0", "--cann", "9.1.0", "--json"], 2),  # a refusal
        (["matrix", "--card", "300I-Pro", "--section", "cards", "--json"], 0),
        (["render", "--card", "300T-A2", "--output", str(tmp_path / "ctx"), "--json"], 0),
        (["run-cmd", "--card", "300T-A2", "--devices", "0-3", "--no-engine", "--json", *on_host, "img:1"], 0),
        (["cdi", "--card", "300T-A2", "--devices", "0-3", "--json", *on_host], 0),
        (["k8s", "--card", "300T-A2", "--devices", "0-3", "--json", *on_host, "img:1"], 0),
        (["audit", "--json", *on_host], None),
    ]


def test_every_json_document_carries_the_version(tmp_path, capsys, monkeypatch):
    from provisioner.cli import main

    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    for args, code in _json_docs(tmp_path):
        rc = main(list(args))
        out, err = capsys.readouterr()
        assert code is None or rc == code, (args, rc, err)
        doc = json.loads(out)
        assert list(doc)[:2] == ["schema", "provision_version"], (args, list(doc)[:3])
        assert doc["provision_version"] == _metadata_version()


def test_json_documents_go_through_one_place():
    """No command prints JSON but through cli.text.emit_json (which stamps the version)."""
    from pathlib import Path

    import provisioner.cli

    offenders = []
    for f in sorted(Path(provisioner.cli.__file__).parent.glob("*.py")):
        if f.name == "text.py":
            continue
        for n, line in enumerate(f.read_text().splitlines(), 1):
            if "json.dump(" in line or ("json.dumps(" in line and "echo" in line):
                offenders.append(f"{f.name}:{n}: {line.strip()}")
    assert not offenders, offenders


# -- shell completion, as the README documents it --------------------------------------------------------


def _documented_completion() -> dict[str, str]:
    """shell -> the `_PROVISION_COMPLETE=<shell>_source` value the README's completion block uses."""
    import re
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme.split("### Shell completion", 1)[1].split("\n## ", 1)[0]
    found = dict(re.findall(r"_PROVISION_COMPLETE=((bash|zsh|fish)_source) provision", section))
    return {shell: value for value, shell in found.items()}


def _provision_script() -> str:
    from pathlib import Path

    return str(Path(sys.executable).parent / "provision")


def test_readme_documents_completion_for_bash_zsh_and_fish():
    assert set(_documented_completion()) == {"bash", "zsh", "fish"}


@pytest.mark.parametrize("shell, marker", [("bash", "complete -o nosort -F _provision_completion provision"),
                                           ("zsh", "#compdef provision"), ("fish", "complete --no-files --command provision")])
def test_documented_completion_command_prints_a_script(shell, marker):
    import os

    env = {**os.environ, "_PROVISION_COMPLETE": _documented_completion()[shell]}
    proc = subprocess.run([_provision_script()], capture_output=True, text=True, env=env)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert marker in proc.stdout and "_PROVISION_COMPLETE=" in proc.stdout


def test_bash_completion_completes_commands_and_choices(tmp_path):
    """Source the documented bash line in a real bash and ask it to complete, as the shell does on TAB."""
    import os
    import shutil

    if not shutil.which("bash"):
        pytest.skip("no bash here")
    bindir = os.path.dirname(_provision_script())
    script = (
        'eval "$(_PROVISION_COMPLETE=bash_source provision)"\n'
        'complete -p provision >/dev/null || exit 3\n'
        'ask() { COMP_WORDS=("$@"); COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 )); COMPREPLY=();'
        ' _provision_completion provision; echo "${COMPREPLY[*]}"; }\n'
        'ask provision re\n'
        'ask provision resolve --registry ""\n'
    )
    proc = subprocess.run(["bash", "--norc", "-c", script], capture_output=True, text=True,
                          env={**os.environ, "PATH": f"{bindir}:{os.environ.get('PATH', '')}"})
    assert proc.returncode == 0, proc.stderr
    commands, registries = proc.stdout.splitlines()
    assert set(commands.split()) == {"render", "resolve"} and set(registries.split()) == {"quay", "dockerhub"}
