"""The grammars every outside value is checked against where it enters (CLI options, overlays, stack files,
image labels, profiles, job specs), and the one escape for text that goes into a ``#`` comment line.

Each checker takes the value and what it is (``--base-image``, ``profile x: base_image``) and returns the
value unchanged, or raises :class:`Invalid` (a ProvisionError: one line, exit 2) saying what is wrong. The
renderers of Dockerfiles, pip.conf and printed shell lines call them again on what they place (a value that
did not pass here is refused there, not written). Base level: imports nothing from the package but errors
(and, where a stack's version lists are checked, the version grammar of versions.py, also base level).

    image_ref     a Docker image reference: [host[:port]/]path[:tag][@algo:hex]
    url           an http(s) URL with a valid host and no whitespace or control characters
    host          a host name (RFC 1123) or an IPv4/IPv6 address; ip_address only an address
    ifname_spec   interface names for HCCL/Gloo (eth0, =eth0, ^docker,lo)
    docker_user   name|uid[:group|gid];  env_key  an environment variable name
    dns_label     a Kubernetes name: an RFC 1123 label (<= 63), or a subdomain (<= 253) with subdomain=True
    name          a container / recipe / file-stem name: [A-Za-z0-9][A-Za-z0-9_.-]*, no "..", no "/"
    version_text  what a version flag or spec may hold: ASCII letters, digits and . + _ - * , < > = ! ~ (no
                  space; at most 64 characters)
    git_ref       a branch, tag or commit for `git checkout`: never an option (no leading '-'), no space
    single_line   any text without control characters (bounded)
    comment       ANY text made safe for one '#' line (control characters escaped, never refused)
    finite        a real number that is neither NaN nor infinite
"""

from __future__ import annotations

import re

from provisioner.errors import ProvisionError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable


class Invalid(ProvisionError):
    """A value does not match its grammar."""


# Longest text any checker accepts (Docker's own limit for a reference is 255 for the name part).
MAX_TEXT = 4096
MAX_VERSION = 64

# Control characters: C0, DEL, C1, and the Unicode line/paragraph separators (str.splitlines breaks on them).
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\ufeff]")

# distribution/reference grammar (docker/distribution reference/regexp.go), ASCII only.
_ALNUM = r"[a-z0-9]+"
_SEP = r"(?:[._]|__|[-]+)"
_PATH_COMPONENT = rf"{_ALNUM}(?:{_SEP}{_ALNUM})*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[0-9a-fA-F:.]+\])(?::[0-9]{{1,5}})?"
_TAG = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
_REFERENCE = re.compile(
    rf"(?:(?P<domain>{_DOMAIN})/)?(?P<path>{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*)"
    rf"(?::(?P<tag>{_TAG}))?(?:@(?P<digest>{_DIGEST}))?",
    re.ASCII,
)
_LABEL = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?", re.ASCII)
_HOST_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?", re.ASCII)
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}", re.ASCII)
# The version grammar (version_text): the module docstring, the refusal and docs/threat-model.md say the same.
_VERSION_TEXT = re.compile(r"[A-Za-z0-9.+_*,<>=!~-]+", re.ASCII)
_VERSION_CHARS = "ASCII letters, digits and . + _ - * , < > = ! ~ only"
_GIT_REF = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._/+-]*", re.ASCII)
_COMMIT = re.compile(r"[0-9a-f]{40}", re.ASCII)


def _show(value: object) -> str:
    """The value as it may appear in a one-line message: repr, shortened."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _text(value: object, what: str, limit: int = MAX_TEXT) -> str:
    if not isinstance(value, str):
        raise Invalid(f"{what}: expected text, got {_show(value)}")
    if not value:
        raise Invalid(f"{what}: empty")
    if len(value) > limit:
        raise Invalid(f"{what}: longer than {limit} characters")
    if _CONTROL.search(value):
        raise Invalid(f"{what}: control characters (newline, tab, ...) are not allowed: {_show(value)}")
    return value


def has_control(text: str) -> bool:
    """True when `text` holds a control character or line separator."""
    return _CONTROL.search(text) is not None


def single_line(value: object, what: str, limit: int = MAX_TEXT) -> str:
    """Text with no control characters (no newline can end the line it is written on)."""
    return _text(value, what, limit)


def image_ref(value: object, what: str = "image reference") -> str:
    """A Docker image reference (``quay.io/ascend/cann:8.3.rc1-910b-ubuntu22.04-py3.11``, ``name@sha256:...``)."""
    text = _text(value, what, 512)
    m = _REFERENCE.fullmatch(text)
    if not m or len(m.group("path")) + len(m.group("domain") or "") > 255:
        raise Invalid(f"{what}: not a Docker image reference ([registry/]name[:tag][@digest]): {_show(value)}")
    return text


def host(value: object, what: str = "host") -> str:
    """A host name (RFC 1123, <= 253 characters) or an IPv4 / IPv6 address."""
    import ipaddress

    text = _text(value, what, 253)
    try:
        ipaddress.ip_address(text)
        return text
    except ValueError:
        pass
    labels = text[:-1].split(".") if text.endswith(".") else text.split(".")
    if not all(_HOST_LABEL.fullmatch(label) for label in labels) or text.replace(".", "").isdigit():
        raise Invalid(f"{what}: not a host name or IP address: {_show(value)}")
    return text


def ip_address(value: object, what: str = "IP address") -> str:
    """An IPv4 or IPv6 address."""
    import ipaddress

    text = _text(value, what, 64)
    try:
        ipaddress.ip_address(text)
    except ValueError:
        raise Invalid(f"{what}: not an IP address: {_show(value)}") from None
    return text


_IFNAME = re.compile(r"[=^]?[A-Za-z0-9_.:@-]{1,15}(?:,[A-Za-z0-9_.:@-]{1,15})*", re.ASCII)
_USER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,31})?", re.ASCII)
_ENV_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}", re.ASCII)


def ifname_spec(value: object, what: str = "interface") -> str:
    """Network interface names as HCCL/Gloo take them: ``eth0``, ``=eth0``, ``^docker,lo``, comma-separated."""
    text = _text(value, what, 256)
    if not _IFNAME.fullmatch(text):
        raise Invalid(f"{what}: not interface names (eth0, =eth0, ^docker; at most 15 characters each): {_show(value)}")
    return text


def docker_user(value: object, what: str = "--user") -> str:
    """A container user as docker run takes it: name or uid, optionally ``:group`` or ``:gid``."""
    text = _text(value, what, 65)
    if not _USER.fullmatch(text):
        raise Invalid(f"{what}: not a user (name|uid[:group|gid]): {_show(value)}")
    return text


def env_key(value: object, what: str = "environment variable") -> str:
    """An environment variable name: a letter or '_', then letters, digits and '_'."""
    text = _text(value, what, 128)
    if not _ENV_KEY.fullmatch(text):
        raise Invalid(f"{what}: not an environment variable name: {_show(value)}")
    return text


def url(value: object, what: str = "URL", schemes: tuple[str, ...] = ("http", "https")) -> str:
    """An absolute URL of one of `schemes` with a valid host; no whitespace, quotes or control characters."""
    from urllib.parse import urlsplit

    text = _text(value, what)
    if any(c.isspace() or c in "\"'<>\\`" for c in text) or not text.isascii():
        raise Invalid(f"{what}: not a URL (spaces, quotes or non-ASCII characters): {_show(value)}")
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as exc:
        raise Invalid(f"{what}: not a URL ({exc}): {_show(value)}") from None
    if parts.scheme not in schemes or not parts.hostname:
        raise Invalid(f"{what}: expected an {'/'.join(schemes)} URL with a host, got {_show(value)}")
    host(parts.hostname, what)
    if port == 0:
        raise Invalid(f"{what}: port 0 in {_show(value)}")
    return text


def dns_label(value: object, what: str = "name", subdomain: bool = False) -> str:
    """A Kubernetes object name: a lower-case RFC 1123 label (<= 63), or a DNS subdomain (<= 253)."""
    text = _text(value, what, 253 if subdomain else 63)
    parts = text.split(".") if subdomain else [text]
    if not all(_LABEL.fullmatch(p) for p in parts):
        kind = "DNS subdomain" if subdomain else "DNS label"
        raise Invalid(f"{what}: not a valid {kind} (lower-case letters, digits and '-', starting and ending"
                      f" with a letter or digit{', dot-separated' if subdomain else ''}): {_show(value)}")
    return text


def name(value: object, what: str = "name") -> str:
    """A plain name (a recipe, a container, a file stem): no path separators, no '..', ASCII."""
    text = _text(value, what, 128)
    if not _NAME.fullmatch(text) or ".." in text:
        raise Invalid(f"{what}: not a plain name (letters, digits, '_', '.', '-'; no '/' or '..'): {_show(value)}")
    return text


def version_text(value: object, what: str = "version") -> str:
    """What a version flag or spec may hold: ASCII letters, digits and . + _ - * , < > = ! ~ (no space; ASCII
    only: Unicode digits are refused), at most MAX_VERSION characters."""
    text = _text(value, what, MAX_VERSION)
    if not _VERSION_TEXT.fullmatch(text):
        raise Invalid(f"{what}: not a version ({_VERSION_CHARS}): {_show(value)}")
    return text


def git_ref(value: object, what: str = "git ref") -> str:
    """A branch, tag or commit as `git checkout` takes it: starts with a letter, digit or '_' (never '-', so
    never an option), then letters, digits and . _ / + -; no '..', at most 255 characters."""
    text = _text(value, what, 255)
    if not _GIT_REF.fullmatch(text) or ".." in text or text.endswith((".", "/", ".lock")):
        raise Invalid(f"{what}: not a git branch, tag or commit (letters, digits and . _ / + -, not starting with"
                      f" '-'): {_show(value)}")
    return text


def git_commit(value: object, what: str = "git commit") -> str:
    """A full git commit: 40 lower-case hex digits (a branch or tag moves; a commit does not)."""
    text = _text(value, what, 40)
    if not _COMMIT.fullmatch(text):
        raise Invalid(f"{what}: not a full 40-hex git commit: {_show(value)}")
    return text


def comment(value: object) -> str:
    """`value` as text that cannot leave the '#' line it is written on: control characters become escapes."""
    text = value if isinstance(value, str) else str(value)
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100
                        else f"\\u{ord(m.group()):04x}", text)


def finite(value: object, what: str = "number") -> float:
    """A real number, not NaN or infinite (bools are not numbers)."""
    import math

    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise Invalid(f"{what}: expected a number, got {_show(value)}")
    if isinstance(value, float) and not math.isfinite(value):
        raise Invalid(f"{what}: must be a finite number, got {value}")
    return value


MAX_DEPTH = 32  # nesting of any data document (YAML, JSON) read from outside; real ones stay under 8


def depth(obj: object, what: str, limit: int = MAX_DEPTH) -> object:
    """`obj` unchanged, or Invalid when dicts/lists nest deeper than `limit` (walked without recursion)."""
    stack = [(obj, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            children: list = list(item.values())
        elif isinstance(item, (list, tuple)):
            children = list(item)
        else:
            continue
        if level > limit:
            raise Invalid(f"{what}: nested deeper than {limit} levels")
        stack.extend((c, level + 1) for c in children)
    return obj


def json_doc(text: str | bytes, what: str, limit: int = MAX_DEPTH) -> object:
    """JSON text from outside (a stack file, an image label): parsed, depth-checked; Invalid when it is not."""
    import json

    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError:
            raise Invalid(f"{what}: not UTF-8 text") from None
    try:
        doc = json.loads(text)
    except RecursionError:
        raise Invalid(f"{what}: nested deeper than {limit} levels") from None
    except ValueError as exc:
        raise Invalid(f"{what}: not valid JSON ({exc})") from None
    return depth(doc, what, limit)


# The Stack fields read back from an image label or a --stack file, with the grammar of each.
_STACK_TEXT: dict[tuple[str, ...], Callable[[object, str], object]] = {("id",): name, ("chip", "family"): name, ("cann", "version"): version_text,
               ("python",): version_text, ("torch", "version"): version_text, ("torch_npu", "version"): version_text,
               ("mindspore", "version"): version_text, ("base_image", "ref"): image_ref,
               ("driver", "summary"): single_line, ("framework",): name, ("card", "id"): single_line,
               ("os",): single_line, ("arch",): name, ("chip", "name"): single_line,
               ("torch", "index_url"): url, ("task",): name, ("dtype", "compute"): name,
               ("dtype", "loss_scaling"): name, ("dtype", "reason"): single_line,
               ("driver", "inherited_from"): version_text, ("driver", "host"): version_text}


def _version_list(value: object, what: str) -> object:
    """A list of versions (a stack's driver.paired): each version_text and a parsed version."""
    from provisioner.versions import V, VersionError

    if not isinstance(value, list):
        raise Invalid(f"{what}: expected a list of versions, got {_show(value)}")
    for n, item in enumerate(value):
        version_text(item, f"{what}[{n}]")
        try:
            V(item)
        except VersionError:
            raise Invalid(f"{what}[{n}]: not a version: {_show(item)}") from None
    return value


def _spec_list(value: object, what: str) -> object:
    """A list of version specs (a stack's driver.compatible): each one line and a parsed spec."""
    from provisioner.versions import MAX_LEN, Spec, VersionError

    if not isinstance(value, list):
        raise Invalid(f"{what}: expected a list of version specs, got {_show(value)}")
    for n, item in enumerate(value):
        _text(item, f"{what}[{n}]", 16 * MAX_LEN)
        try:
            Spec(item)
        except VersionError as exc:
            raise Invalid(f"{what}[{n}]: not a version spec ({exc})") from None
    return value


# ... and the lists code reads (driverfit compares a host's driver against them).
_STACK_LISTS: dict[tuple[str, ...], Callable[[object, str], object]] = {("driver", "paired"): _version_list,
                                                                       ("driver", "compatible"): _spec_list}


def stack_doc(doc: object, what: str) -> dict:
    """A Stack from outside (image label, --stack file): a JSON object whose fields that code reads have the
    right type and grammar; anything else is Invalid (one line) rather than a traceback or injected text."""
    if not isinstance(doc, dict):
        raise Invalid(f"{what}: not a provision stack (a JSON object)")
    depth(doc, what)
    for path, check in {**_STACK_TEXT, **_STACK_LISTS}.items():
        node: object = doc
        for i, key in enumerate(path):
            if node is None:
                break
            if not isinstance(node, dict):
                raise Invalid(f"{what}: {'.'.join(path[:i])} must be an object")
            node = node.get(key)
        if node is None or (path == ("base_image", "ref") and node == ""):
            continue
        check(node, f"{what}: {'.'.join(path)}")
    return doc
