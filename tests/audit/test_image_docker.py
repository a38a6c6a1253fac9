"""`provision audit --image` against a real Docker engine (the shared engine fixture)."""

import io
import json

import pytest

from provisioner.cli import main
from provisioner.image import labels as image_labels
from provisioner.resolve import cached, request

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def engine(docker_client):
    return docker_client


def _build(client, tag: str, labels: dict) -> None:
    # FROM scratch needs no registry; the labels are the whole point.
    client.images.build(fileobj=io.BytesIO(b"FROM scratch\nLABEL org.provision.test=audit\n"), tag=tag, labels=labels,
                        rm=True)


def test_audit_reads_the_stack_label(engine, audit_host, matrix, capsys):
    stack = cached.cached_resolve(matrix, request.build(matrix, card="800T-A2", driver="25.0.rc1.1", arch="aarch64"))
    tag = f"provision-audit-test:{stack['id']}"
    _build(engine, tag, {image_labels.STACK_LABEL: json.dumps(stack, separators=(",", ":")),
                         image_labels.STACK_ID_LABEL: stack["id"]})
    try:
        h = audit_host("seed-800ta2")
        rc = main(["audit", "--root", str(h.root), "--dev-root", str(h.dev_root), "--image", tag, "--json"])
        doc = json.loads(capsys.readouterr().out)
        assert rc == 0
        assert doc["image"] == {"ref": tag, "stack_id": stack["id"], "recommended": None}
        assert [f["id"] for f in doc["findings"] if f["id"].startswith("image-")] == ["image-driver-cann-ok", "image-fits"]
        h2 = audit_host("broken-driver-old")
        rc = main(["audit", "--root", str(h2.root), "--dev-root", str(h2.dev_root), "--image", tag, "--json"])
        doc = json.loads(capsys.readouterr().out)
        assert rc == 2
        assert {"image-arch-mismatch", "image-driver-too-old", "image-recommendation"} <= {f["id"] for f in doc["findings"]}
    finally:
        engine.images.remove(tag, force=True)


def test_image_without_label_is_one_line(engine, tmp_path, capsys):
    tag = "provision-audit-test:nolabel"
    _build(engine, tag, {})
    try:
        rc = main(["audit", "--root", str(tmp_path), "--image", tag])
        out = capsys.readouterr()
        assert rc == 2 and out.out == ""
        assert out.err == (f"provision: error: {tag} has no org.provision.stack label: it was not built by"
                           " `provision build`\n")
        rc = main(["audit", "--root", str(tmp_path), "--image", "provision-audit-test:absent"])
        assert rc == 2 and "no such image in the local engine" in capsys.readouterr().err
    finally:
        engine.images.remove(tag, force=True)
