"""Framework sets: pinned commits, locked environments (matrices/frameworks.yaml) and the images they render."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest

from provisioner.errors import MatrixError, ProvisionError
from provisioner.image import frameworks, fwlock, recipes, render
from provisioner.image.labels import framework_from_labels
from provisioner.matrix import loader
from provisioner.matrix.fields import CHECKOUTS
from provisioner.resolve import request, solve
from tests.helpers import fwrepos

ROOT = Path(__file__).resolve().parents[2]
HEX40 = re.compile(r"^[0-9a-f]{40}$")
SEED_RL = "mindspeed-rl-2.0.0-torch2.5.1-py3.10"


@pytest.fixture(scope="module")
def m():
    return loader.load(use_cache=False)


def envs(m):
    return {r["id"]: r for r in m.rows("framework_envs")}


def test_every_checkout_is_a_commit_with_its_label(m):
    for row in m.rows("llm_bundles"):
        labels = {k: row.get(f"{k}_ref") for k in CHECKOUTS if row.get(f"{k}_ref")}
        assert set(labels) == set(row["commits"]), row["id"]
        assert all(HEX40.match(c) for c in row["commits"].values()), row["id"]
    for row in m.rows("mindformers"):
        assert HEX40.match(row["commit"]) and row["ref"], row["version"]


def test_a_branch_name_where_a_commit_belongs_is_refused(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("llm_bundles:\n  - id: mindspeed-llm-2.0.0\n    commits:\n      mindspeed: 2.0.0_core_r0.8.0\n")
    with pytest.raises(MatrixError, match=r"bad.yaml:3: .*40-hex git commit"):
        loader.load([str(bad)], use_cache=False)


def test_every_framework_set_has_a_locked_environment(m):
    sets = {r["id"] for r in m.rows("llm_bundles")} | {f"mindformers-{r['version']}" for r in m.rows("mindformers")}
    by_set = {}
    for env in m.rows("framework_envs"):
        assert env["set"] in sets, env["id"]
        assert env.get("layers"), f"{env['id']} is not locked: run scripts/lock_frameworks.py"
        assert env["resolved"]["archs"] == ["aarch64", "x86_64"] and env["resolved"]["python"] == env["python"]
        assert set(env["layers"]) <= {"base", *(s["name"] for s in env["steps"])}, env["id"]
        by_set.setdefault(env["set"], []).append(env["id"])
    assert set(by_set) == sets, f"sets without an environment: {sorted(sets - set(by_set))}"


def test_locks_pin_everything_once_per_architecture(m):
    from packaging.requirements import Requirement

    for env in m.rows("framework_envs"):
        for arch in ("x86_64", "aarch64"):
            seen = {}
            for layer, lines in env["layers"].items():
                for line in lines:
                    req = Requirement(line)
                    if req.marker is not None and not req.marker.evaluate({"platform_machine": arch}):
                        continue
                    (spec,) = req.specifier
                    assert spec.operator == "==", line
                    assert req.name not in seen, f"{env['id']} {arch}: {req.name} in {seen.get(req.name)} and {layer}"
                    seen[req.name] = layer
            assert not {"torch", "torch-npu", "mindspore"} & set(seen), env["id"]  # the stack's framework layer


def test_seed_grpo_environment_is_the_upstream_order(m):
    env = envs(m)[SEED_RL]
    assert [s["name"] for s in env["steps"]] == ["vllm-build", "vllm", "vllm-ascend", "mindspeed", "mindspeed-rl",
                                                 "antlr4"]
    lock = {line.split(" ;")[0] for lines in env["layers"].values() for line in lines}
    # MindSpeed-RL wins over the torch line and MindSpeed where they disagree; MindSpeed-LLM's pins never enter.
    assert {"transformers==4.48.2", "ray==2.42.1", "numpy==1.26.4", "antlr4-python3-runtime==4.7.2",
            "hydra-core==1.3.2", "tensordict==0.1.2"} <= lock
    assert not {"ray==2.10.0", "peft==0.7.1", "transformers==4.43.2"} & lock
    assert env["layers"]["antlr4"] == ["antlr4-python3-runtime==4.7.2"]
    over = {o["package"]: o for o in env["overrides"]}
    assert over["transformers"]["torch_line"] == "4.47.1" and over["transformers"]["lock"] == "4.48.2"
    assert any("transformers==4.48.2" in b for b in over["transformers"]["by"])
    # Upstream's own order leaves hydra-core's antlr4 pin unmet (latex2sympy2 needs 4.7.2): recorded, with who.
    conflict = {(c["package"], c["installed"]) for c in env["conflicts"]}
    assert ("hydra-core", "4.7.2") in conflict
    assert set(env["sources"]) == {"vllm", "vllm-ascend"}


def test_fixture_files_are_the_upstream_files_the_locks_were_made_from(m):
    # One directory per MindSpeed set (tests/fixtures/frameworks/SET/CHECKOUT), one checkout per pinned commit; every
    # upstream file a lock of the set read at that commit is there, byte for byte.
    bundles = {b["id"]: b for b in m.rows("llm_bundles")}
    checked: dict[str, set[str]] = {}
    # mindformers-scripts holds the MindFormers job scripts, megatron-args Megatron-LM's arguments.py at the pinned
    # commits (tests/jobs/test_upstream_runs.py), not a set's checkouts
    sets = sorted(p for p in fwrepos.FIXTURES.iterdir()
                  if p.is_dir() and p.name not in ("mindformers-scripts", "megatron-args"))
    assert {p.name for p in sets} <= set(bundles), "a fixture directory that names no MindSpeed set"
    for fixture in sets:
        bundle = bundles[fixture.name]
        assert {p.name for p in fixture.iterdir()} == set(bundle["commits"]), fixture.name
        for env in (e for e in m.rows("framework_envs") if e["set"] == fixture.name):
            for key, digest in env["inputs"].items():
                name, _, path = key.partition(":")
                checkout, _, short = name.partition("@")
                if short and bundle["commits"][checkout].startswith(short):
                    got = hashlib.sha256((fixture / checkout / path).read_bytes()).hexdigest()
                    assert got == digest, f"{fixture.name}/{checkout}/{path} is not the file {env['id']} read ({key})"
                    checked.setdefault(fixture.name, set()).add(f"{checkout}/{path}")
    llm = {"mindspeed/requirements.txt", "mindspeed_llm/requirements.txt"}
    assert checked == {
        # MindSpeed-LLM's requirements are not installed for RL (as upstream), so its file is no input there
        **{f"mindspeed-rl-{v}": {"mindspeed/requirements.txt", "mindspeed_rl/requirements.txt",
                                 "vllm_ascend/requirements.txt"} for v in ("2.0.0", "2.1.0", "2.2.0", "2.3.0")},
        # every MindSpeed-LLM set of the matrix has its fixture (the image tests build each one's checkouts)
        **{b["id"]: llm for b in bundles.values() if b["kind"] == "mindspeed-llm"}}
    import tarfile

    mf = envs(m)["mindformers-1.7.0-mindspore2.7.1-py3.11"]
    with tarfile.open(fwrepos.FIXTURES / "mindformers-v1.7.0.tar.gz") as tar:
        blob = tar.extractfile("mindformers/requirements.txt").read()
    assert hashlib.sha256(blob).hexdigest() == next(iter(mf["inputs"].values()))


def test_a_steps_pin_on_the_stacks_framework_is_left_to_the_framework_layer():
    """vllm-ascend 8c7bc459 (MindSpeed-RL 2.2.0's) pins torch-npu==2.5.1.post1 in requirements.txt: pip is not asked
    for it (its x86_64 wheel would pull in torch==2.5.1+cpu, which PyPI has not), the stack's framework layer holds
    it; a pin the framework does not meet is an unmet requirement of the package, as upstream's pip check says."""
    from provisioner.image.pipreport import Item, Target

    asked = []

    class Pip:  # pip's report for the target: what pip would install (the one call fwlock makes)
        def report(self, target, reqs, constraints=(), no_deps=False):
            asked.append(list(reqs))
            return [Item("msgpack", "1.1.0", (), ""), Item("torch-npu", "2.5.1.post1", ("torch==2.5.1",), "")]

    target = Target("3.10", "x86_64", ("manylinux2014_x86_64",))
    hard = {"torch": "2.5.1", "torch-npu": "2.5.1.post1"}
    step = fwlock.Step("vllm-ascend", "t", ("msgpack", "torch>=2.5.1", "torch-npu==2.5.1.post1"), "o")
    items = fwlock.resolve_step(Pip(), target, step, {}, hard)
    assert asked == [["msgpack"]] and [i.name for i in items] == ["msgpack"]
    state = {"msgpack": fwlock.Entry("1.1.0", "vllm-ascend", ())}
    dev = {"vllm-ascend": ("torch-npu==2.5.1.post1.dev20250528",)}  # dedace4c's pin (MindSpeed-RL 2.1.0)
    assert fwlock.unmet(state, target, hard, {"vllm-ascend": step.requirements}) == []
    assert [c["installed"] for c in fwlock.unmet(state, target, hard, dev)] == ["2.5.1.post1"]


def test_a_pin_no_index_serves_is_substituted_by_name_and_said(tmp_path):
    """MindSpeed-RL 2.1.0/2.2.0 pin av==14.3.0, a PyPI release without files: the step's `substitute` replaces that
    line (and only that one) and says so; a substitute the file does not need, or one without notes, is refused."""
    reqs, done = fwlock.substitute(["numpy==1.26.4", "av==14.3.0", "ray==2.42.1"], {"av": "av==14.2.0"})
    assert reqs == ["numpy==1.26.4", "av==14.2.0", "ray==2.42.1"] and done == ["av==14.3.0 -> av==14.2.0"]
    with pytest.raises(ProvisionError, match="substitute names av, which the step's requirements do not hold"):
        fwlock.substitute(["numpy==1.26.4"], {"av": "av==14.2.0"})
    env = {r["id"]: r for r in loader.load(use_cache=False).rows("framework_envs")}["mindspeed-rl-2.2.0-torch2.5.1-py3.10"]
    step = next(s for s in env["steps"] if s["name"] == "mindspeed-rl")
    assert step["substitute"] == {"av": "av==14.2.0"} and "14.3.0" in step["notes"]
    assert "av==14.2.0" in env["layers"]["mindspeed-rl"]  # the lock was made with the substitute
    bad = tmp_path / "bad.yaml"
    row = ("framework_envs:\n  - id: x\n    set: mindspeed-rl-2.2.0\n    python: '3.10'\n    steps:\n"
           "      - {name: s, title: t, source: s, requirements: [av==14.3.0], substitute: {av: numpy==1}, notes: n}\n"
           "    source: s\n")
    bad.write_text(row)
    with pytest.raises(MatrixError, match="substitute.av: the requirement must name av"):
        loader.load([str(bad)], use_cache=False)
    bad.write_text(row.replace("numpy==1", "av==14.2.0").replace(", notes: n", ""))
    with pytest.raises(MatrixError, match="with the step's notes saying why"):
        loader.load([str(bad)], use_cache=False)


def test_parse_requirements_follows_pip_file_syntax():
    text = "numpy<2  # pinned\n\n# comment\n--extra-index-url https://x\n-r more.txt\nfoo[bar]==1; python_version<'4'\n"
    got = fwlock.parse_requirements(text, "t", include=lambda p: "included==1\n")
    assert got == ["numpy<2", "included==1", "foo[bar]==1; python_version<'4'"]
    with pytest.raises(ProvisionError, match="bad requirement"):
        fwlock.parse_requirements("not a requirement!!\n", "t")


# ----------------------------------------------------------------- rendering


@pytest.fixture(scope="module")
def rl(m):
    stack = solve.resolve(m, request.build(m, profile="mindspeed-rl-2.0.0-grpo", arch="aarch64"))
    return render.render(m, stack, recipes.choose(stack, "mindspeed-llm"))


def test_seed_grpo_image_renders_with_vllm_ascend_antlr4_and_jemalloc(rl):
    df = rl.dockerfile
    assert ("VLLM_TARGET_DEVICE=empty TORCH_DEVICE_BACKEND_AUTOLOAD=0 pip wheel --no-cache-dir --no-deps"
            " --no-build-isolation --require-hashes") in df
    sdist = rl.read("requirements/sdist-vllm.txt").decode()
    assert sdist.startswith("vllm==0.7.3 --hash=sha256:841cc30b")
    assert "checkout --quiet --detach 0713836e95fe993feefe334945b5b273e4add1f1" in df
    assert "SETUPTOOLS_SCM_PRETEND_VERSION=0.7.3rc2.dev5+g0713836e pip wheel" in df
    assert rl.read("requirements/antlr4.txt").decode().splitlines()[1:] == ["antlr4-python3-runtime==4.7.2"]
    final = df.split("\nFROM quay.io")[-1]
    assert "libjemalloc2" in final and "ENV LD_PRELOAD=/usr/local/lib/provision/libjemalloc.so.2" in final
    assert "ray==2.42.1" in rl.read("requirements.lock").decode()
    # Every checkout at its 40-hex commit, the refs only as labels in comments.
    for commit in ("0dfa0035ec54d9a74b2f6ee2867367df897299df", "baf94af3c667248865f23df73b9fb8e2395e6fd0",
                   "421ef7bcb83fb31844a1efb688cde71705c0526e", "62e9928ae89d9570f659b46e816bc55e1191b5e7"):
        assert f"checkout --quiet --detach {commit}" in df
    assert "checkout --quiet core_r0.8.0" not in df and "checkout --quiet 2.0.0" not in df


def test_no_pip_call_combines_requirement_files(rl):
    for line in rl.dockerfile.splitlines():
        if ("pip install" in line or "pip wheel" in line) and not line.startswith("#"):
            assert line.count(" -r ") <= 1, line
            if " -r " in line:  # only the rendered lock files, never an upstream requirements file
                assert line.split(" -r ")[-1].startswith("/opt/build/requirements/"), line
    # every layer installs without resolving anything
    assert all("--no-deps" in line for line in rl.dockerfile.splitlines()
               if "pip install" in line and not line.startswith("#") and "setuptools==" not in line)


def test_lock_check_accepts_exactly_the_recorded_conflicts(rl, m):
    env = envs(m)[SEED_RL]
    accepted = re.findall(r"--accept '([^']+)'", rl.dockerfile)
    assert sorted(accepted) == sorted(f"{c['package']}:{c['requires']}" for c in env["conflicts"]
                                      if "aarch64" in c.get("archs", ["aarch64"]))
    assert "--strict" in rl.dockerfile


def test_labels_tell_launch_which_set_and_commits(rl):
    fw = framework_from_labels(rl.manifest["labels"])
    assert fw["set"] == "mindspeed-rl-2.0.0" and fw["kind"] == "mindspeed-rl" and fw["env"] == SEED_RL
    assert fw["checkouts"]["mindspeed_rl"] == {
        "commit": "62e9928ae89d9570f659b46e816bc55e1191b5e7", "ref": "2.0.0",
        "from": "https://gitee.com/ascend/MindSpeed-RL.git", "path": "/opt/MindSpeed-RL"}
    assert fw["checkouts"]["vllm_ascend"]["path"] is None  # built into a wheel, not kept


def test_source_archives_go_into_the_context(m, tmp_path):
    repos = fwrepos.rl_repos(tmp_path)
    overlay = fwrepos.bundle_overlay(tmp_path / "o.yaml", "mindspeed-rl-2.0.0",
                                     {k: c for k, (_, c) in repos.items()})
    mm = loader.load([str(overlay)], use_cache=False)
    stack = solve.resolve(mm, request.build(mm, profile="mindspeed-rl-2.0.0-grpo", arch="aarch64"))
    ctx = render.render(mm, stack, recipes.choose(stack, "mindspeed-llm"),
                        sources={"mindspeed_rl": str(repos["mindspeed_rl"][0])})
    assert "sources/mindspeed_rl.tar" in ctx.files
    assert "git get-tar-commit-id < /opt/build/sources/mindspeed_rl.tar" in ctx.dockerfile
    assert f"the set pins {repos['mindspeed_rl'][1]}" in ctx.dockerfile
    # the other checkouts still come from their URLs
    assert "git clone --quiet https://gitee.com/ascend/MindSpeed.git" in ctx.dockerfile


def test_render_refuses_a_source_at_another_commit(m, tmp_path):
    repos = fwrepos.rl_repos(tmp_path)
    stack = solve.resolve(m, request.build(m, profile="mindspeed-rl-2.0.0-grpo", arch="aarch64"))
    with pytest.raises(ProvisionError) as err:
        render.render(m, stack, recipes.choose(stack, "mindspeed-llm"),
                      sources={"mindspeed": str(repos["mindspeed"][0])})
    assert repos["mindspeed"][1] in str(err.value) and "0dfa0035ec54d9a74b2f6ee2867367df897299df" in str(err.value)


def test_python_without_a_lock_is_a_clear_error(m):
    stack = solve.resolve(m, request.build(m, card="800T-A2", extras=["mindspeed-llm"], arch="aarch64"))
    stack = {**stack, "python": "3.9"}
    with pytest.raises(ProvisionError, match=r"no locked environment for mindspeed-llm-.* on Python 3.9"):
        frameworks.plan(m, stack)


def test_mindspore_image_has_mindformers_and_conversion_on_path(m):
    stack = solve.resolve(m, request.build(m, profile="mindspore-2.7.1-a2", arch="x86_64"))
    stack_mf = solve.resolve(m, request.build(m, **recipes.request_options("mindspore", {
        "profile": None, "card": "800T-A2", "mindspore": "2.7.1", "arch": "x86_64"})))
    assert stack_mf["extras"]["mindformers"]["version"] == "1.7.0"
    ctx = render.render(m, stack_mf, recipes.choose(stack_mf, "mindspore"))
    assert "pip wheel --no-cache-dir --no-deps --no-build-isolation -w /opt/wheels /opt/src/mindformers" in ctx.dockerfile
    assert "COPY --from=checkouts /opt/src/mindformers /opt/mindformers" in ctx.dockerfile
    wrapper = ctx.read("files/commands/mindformers-convert-weight").decode()
    assert "exec /opt/venv/bin/python /opt/mindformers/convert_weight.py" in wrapper
    assert ctx.modes["files/commands/mindformers-convert-weight"] == 0o755
    assert "mindspore==2.7.1" in ctx.read("requirements/framework.txt").decode()
    assert stack["framework"] == "mindspore"


def test_with_mindformers_needs_mindspore(m):
    with pytest.raises(ProvisionError, match="needs --framework mindspore"):
        request.build(m, card="800T-A2", framework="pytorch", extras=["mindformers"])
    assert request.build(m, card="800T-A2", extras=["mindformers"]).framework == "mindspore"


def test_lock_header_names_overrides(rl):
    lock = rl.read("requirements.lock").decode()
    assert "transformers 4.47.1 (torch line) -> 4.48.2 by" in lock
    assert "accepted upstream conflict: hydra-core 1.3.2 requires antlr4-python3-runtime==4.9.*" in lock
    assert json.loads(rl.read("stack.json"))["recipe"]["name"] == "mindspeed-llm"


@pytest.mark.parametrize("checkouts, fragment", [
    ("[1]", "not a JSON object"),
    ('"x"', "not a JSON object"),
    ("[" * 100000 + "]" * 100000, "nested deeper"),
    ('{"mindspeed_llm": [1]}', "is not an object"),
    ('{"mindspeed_llm": {"path": ["/x"]}}', "expected text"),
    ('{"mindspeed_llm": {"path": "/x\\nRUN y"}}', "control characters"),
    ('{"../x": {"path": "/x"}}', "checkout name"),
    ("{not json", "not valid JSON"),
])
def test_framework_labels_from_an_untrusted_image_are_checked(checkouts, fragment):
    """Review A #5: the checkouts label goes through validate.json_doc and a shape check; a bad one gives
    checkouts {} and a note, never a traceback (and the job catalog reads {} as 'no path given')."""
    from provisioner.jobs import catalog

    fw = framework_from_labels({"org.provision.framework.set": "x", "org.provision.framework.checkouts": checkouts})
    assert fw["checkouts"] == {} and len(fw["notes"]) == 1 and fragment in fw["notes"][0], fw["notes"]
    where = catalog.checkout({"checkout_repo": "mindspeed_llm", "recipe": "mindspeed-llm", "checkout": "/x"}, None, fw)
    assert isinstance(where, str) and where.startswith("/")


def test_framework_label_names_are_plain_names():
    fw = framework_from_labels({"org.provision.framework.set": "a;b", "org.provision.framework.kind": "mindspeed-llm",
                                "org.provision.framework.env": "../x"})
    assert fw["set"] is None and fw["kind"] == "mindspeed-llm" and fw["env"] is None and len(fw["notes"]) == 2
    assert framework_from_labels({"org.provision.framework.kind": "x"}) is None


@pytest.mark.parametrize("args, set_id", [
    ({"cann": "8.1.RC1", "torch": "2.1.0"}, "mindspeed-llm-2.0.0"),
    ({"cann": "8.2.RC1", "python": "3.10", "base_image": "registry.example.com/cann-py3.10:8.2.rc1"},
     "mindspeed-llm-2.1.0"),
])
def test_apex_the_install_guide_installs_is_never_dropped_silently(m, args, set_id):
    """MindSpeed-LLM 2.0.0 and 2.1.0 install Ascend Apex (their docs' install guide; llm_bundles `apex: true`).
    Without --with apex the image has none: resolve warns and the Dockerfile says so, with the way to add it."""
    req = {"card": "800T-A2", "arch": "aarch64", **args}
    stack = solve.resolve(m, request.build(m, extras=["mindspeed-llm"], **req))
    assert stack["extras"]["mindspeed_llm"]["set"] == set_id and stack["apex"] is None
    [warning] = [w for w in stack["warnings"] if "Ascend Apex" in w]
    assert warning.startswith(f"{set_id}: its install guide also installs Ascend Apex, which this stack leaves out")
    assert "add --with apex to build it from https://gitee.com/ascend/apex" in warning
    df = render.render(m, stack, recipes.choose(stack, "mindspeed-llm")).dockerfile
    assert f"# {warning}.\n" in df and "AS apex" not in df
    # With --with apex: the apex stage, and nothing to say.
    stack = solve.resolve(m, request.build(m, extras=["mindspeed-llm", "apex"], **req))
    assert stack["extras"]["mindspeed_llm"]["set"] == set_id and stack["apex"]
    assert not [w for w in stack["warnings"] if "Ascend Apex" in w]
    df = render.render(m, stack, recipes.choose(stack, "mindspeed-llm")).dockerfile
    assert "FROM deps AS apex" in df and "its install guide also installs Ascend Apex" not in df


def test_sets_whose_guide_has_no_apex_say_nothing_of_it(m):
    stack = solve.resolve(m, request.build(m, card="800T-A2", cann="9.0.0", extras=["mindspeed-llm"], arch="aarch64"))
    assert stack["extras"]["mindspeed_llm"]["set"] == "mindspeed-llm-26.0.0"
    assert not [w for w in stack["warnings"] if "Apex" in w]
    assert "Ascend Apex" not in render.render(m, stack, recipes.choose(stack, "mindspeed-llm")).dockerfile


def test_deps_hint_for_a_framework_set_names_its_python_and_base_image(m, rl):
    """The deps stage's message when the base lacks the stack's Python: for a framework set --python cannot
    help (its environment is locked for one Python), a base image of that CANN with that Python does."""
    stack = solve.resolve(m, request.build(m, card="800T-A2", cann="8.3.RC1", python="3.10", extras=["mindspeed-llm"],
                                           base_image="registry.example.com/cann-py3.10:8.3.rc1", arch="x86_64"))
    df = render.render(m, stack, recipes.choose(stack, "mindspeed-llm")).dockerfile
    assert ("the base image has no python3.10, which the stack needs (mindspeed-llm-2.2.0 is locked for Python 3.10"
            " only: pass --base-image with a CANN 8.3.RC1 image that has Python 3.10)") in df
    assert "pass --python" not in df and "pass --python" not in rl.dockerfile
    assert "(mindspeed-rl-2.0.0 is locked for Python 3.10 only: pass --base-image with a CANN 8.1.RC1" in rl.dockerfile
    plain = solve.resolve(m, request.build(m, card="300T-A2", arch="x86_64"))
    assert "(pass --python to match it)" in render.render(m, plain, recipes.choose(plain, None)).dockerfile
