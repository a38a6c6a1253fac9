"""Values per option kind, drawn with hypothesis: mostly hostile, often valid (so the deeper code is reached),
often valid with an injected line. An option's kind comes from its name and click type, so a new option
gets the right kind (or the generic hostile text) without a change here."""

from __future__ import annotations

import click
from hypothesis import strategies as st

from tests.fuzz.harness import CANARY, HOSTILE, INJECTIONS

FILE_OPTS = {"--matrix", "--stack", "--rank-table", "--trusted-ca", "--npu-smi-output", "--stack-file", "--image-tags",
             "--job", "--env-file", "--source"}
ROOT_OPTS = {"--root", "--host-root"}
DEV_OPTS = {"--dev-root"}
OUTPUT_OPTS = {"-o", "--output"}
DIR_OPTS = {"--wheelhouse"}
IMAGE_OPTS = {"--image", "--base-image", "--tag"}
URL_OPTS = {"--pip-index-url", "--extra-index-url"}
IP_OPTS = {"--master-addr", "--hccl-if-ip", "--host-ip", "--container-ip"}
VERSION_OPTS = {"--cann", "--torch", "--torch-npu", "--python", "--mindspore", "--driver", "--for-host"}
NETWORK = ["host", "bridge", "none", "default"]
# Never fuzzed: these reach the network.
SKIP = {"--online"}

OUTPUTS = ["out", "out/ctx", "link/ctx", "link/a/b/c", "new/dir/out.yaml", "link/x.yaml", "out.json", "a b/c",
           "link", ".", "x/../y", f"o\n{CANARY}", "link/../out2"]


def hostile() -> st.SearchStrategy[str]:
    return st.one_of(st.sampled_from(HOSTILE), st.sampled_from(INJECTIONS), st.text(max_size=30),
                     st.text(alphabet=st.characters(codec="utf-8"), min_size=1, max_size=8))


def spiked(valid: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    """Valid values, hostile ones, and valid ones with an injected line or hostile tail."""
    return st.one_of(valid, valid, hostile(),
                     st.builds(lambda v, i: v + i, valid, st.sampled_from(INJECTIONS + HOSTILE[:20])))


def value_for(name: str, param: click.Parameter, pool, outputs: list[str]) -> st.SearchStrategy[str]:
    t = param.type
    if name in FILE_OPTS:
        files = pool.stacks if name in ("--stack", "--stack-file") else pool.overlays
        if name == "--trusted-ca":
            files = [pool.files["ca"], *pool.files.values()]
        return st.one_of(st.sampled_from(files), hostile())
    if name in ROOT_OPTS:
        return st.one_of(st.sampled_from([r for r, _ in pool.roots]), hostile())
    if name in DEV_OPTS:
        return st.one_of(st.sampled_from([d for _, d in pool.roots]), hostile())
    if name in OUTPUT_OPTS:
        return st.sampled_from(OUTPUTS).map(lambda o: (outputs.append(o), o)[1])
    if name in DIR_OPTS:
        return st.one_of(st.sampled_from([pool.files["dir"], pool.files["fifo"], pool.files["missing"]]), hostile())
    if name in IMAGE_OPTS:
        return spiked(st.sampled_from(["img:1", "quay.io/ascend/cann:8.0.rc1-910b-ubuntu22.04-py3.10",
                                       "localhost:5000/a/b@sha256:" + "a" * 64, "provision/x:1"]))
    if name in URL_OPTS:
        return spiked(st.sampled_from(["https://pypi.org/simple", "http://10.0.0.1:8080/simple/", "file:///srv/wheels"]))
    if name in IP_OPTS:
        return spiked(st.sampled_from(["10.0.0.1", "fe80::1", "node-0.example", "192.168.1.2"]))
    if name == "--card":
        return spiked(st.sampled_from(pool.cards))
    if name == "--profile":
        return spiked(st.sampled_from(pool.profiles))
    if name == "--devices":
        return spiked(st.sampled_from(["0", "0-3", "all", "0-1,3", "7", "0-7"]))
    if name in VERSION_OPTS:
        return spiked(st.sampled_from(pool.versions))
    if name == "--network":
        return spiked(st.sampled_from(NETWORK))
    if name == "--with":
        return spiked(st.sampled_from(["apex", "mindspeed-llm", "deepspeed", "apex,deepspeed", "mindspore"]))
    if name in ("--name", "--namespace"):
        return spiked(st.sampled_from(["job-1", "provision-train", "ns", "team-a"]))
    if name in ("-e", "--env", "--label"):
        return spiked(st.sampled_from(["A=1", "PATH", "K=v w", "x=1"]))
    if name in ("-v", "--volume"):
        return spiked(st.sampled_from(["/data:/data:ro", "/tmp:/w"]))
    if name in ("--shm-size",):
        return spiked(st.sampled_from(["16g", "512m", "1"]))
    if name in ("--socket-ifname",):
        return spiked(st.sampled_from(["eth0", "=eth0", "^docker,lo"]))
    if name in ("--user",):
        return spiked(st.sampled_from(["1000", "1000:1000", "root"]))
    if isinstance(t, click.Choice):
        return st.one_of(st.sampled_from(list(t.choices)), st.sampled_from(list(t.choices)), hostile())
    if isinstance(t, (click.IntRange, click.FloatRange)) or t in (click.INT, click.FLOAT):
        return st.one_of(st.integers(-5, 100).map(str), st.sampled_from(["nan", "inf", "-inf", "1e999", "0", "9" * 40,
                                                                          "0.5", "१"]), hostile())
    return hostile()


def argv_for(data, path: tuple[str, ...], cmd: click.Command, pool) -> tuple[list[str], list[str]]:
    """One command line for `cmd`: required options mostly present, others drawn; then the arguments."""
    outputs: list[str] = []
    opts: list[str] = []
    args: list[str] = []
    params = [p for p in cmd.params if p.name != "help" and not (p.opts and p.opts[0] in SKIP)]
    for p in params:
        if isinstance(p, click.Argument):
            continue
        name = max(p.opts, key=len) if p.opts else p.name
        if name == "--output" and "-o" in p.opts:
            name = "-o"
        if getattr(p, "is_flag", False) and not p.secondary_opts:
            if data.draw(st.integers(0, 3), label=name) == 0:
                opts.append(p.opts[0])
            continue
        present = data.draw(st.integers(0, 9), label=f"{name}?") < (9 if p.required else 3)
        if not present:
            if name == "-o" and isinstance(p.default, str):
                outputs.append(p.default)  # the command writes its documented default output (matrix sync)
            continue
        count = data.draw(st.integers(1, 3), label=f"{name}#") if getattr(p, "multiple", False) else 1
        for _ in range(count):
            value = data.draw(value_for(name, p, pool, outputs), label=name)
            if data.draw(st.integers(0, 4), label=f"{name}=") == 0 and name.startswith("--"):
                opts.append(f"{name}={value}")
            else:
                opts.extend([p.opts[0], value])
    for p in params:
        if not isinstance(p, click.Argument):
            continue
        if p.nargs == -1:
            n = data.draw(st.integers(0, 3), label=f"{p.name}#")
            if n:
                args.append("--")
                args.extend(data.draw(st.lists(st.one_of(hostile(), st.sampled_from(["python", "-c", "x=1", "a b"])),
                                               min_size=n, max_size=n), label=p.name))
        elif p.name in ("image",):
            args.append(data.draw(value_for("--image", p, pool, outputs), label=p.name))
        else:
            args.append(data.draw(hostile(), label=p.name))
    # Arguments after options (a value starting with '-' stays a value: the arguments come last).
    if args and not args[0] == "--" and args[0].startswith("-"):
        args.insert(0, "--")
    return [*path, *opts, *args], outputs
