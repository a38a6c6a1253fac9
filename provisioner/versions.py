"""Version strings of the Ascend world, compared correctly.

CANN (``8.0.RC1``, ``8.2.RC1.alpha003``, ``9.0.0-beta.1``), HDK drivers
(``24.1.rc3``, ``25.0.rc1.1``), firmware (``7.7.0.1.231``), Python (``3.10``)
and PEP 440 wheels (``2.1.0.post17``, ``2.5.1rc1``) all parse into one key:
the release numbers, then a chain of (stage, number) pairs. A final release
sorts after its release candidates; ``rc1.1`` is a patch of ``rc1``;
``RC1.alpha003`` is a pre-release of ``RC1``. Case does not matter.

Specs (strings in matrices/, OR-ed when given as a list):
``X`` exact, ``X.*`` any version starting with X, ``A..B`` inclusive range
(B may end in ``.*``), and ``>=A``, ``>A``, ``<=B``, ``<B`` joined by commas.
"""

from __future__ import annotations

import re
from functools import lru_cache, total_ordering

_TOKEN = re.compile(r"[0-9]+|[a-z]+", re.ASCII)
# Longer than any real version; bounds the work (and int() of a long digit run) for hostile input.
MAX_LEN = 64
# Rank of each stage within a chain; END closes every chain so that a final
# release (END right after the numbers) sorts after rc/beta/alpha, and a
# post/patch number sorts after END.
_RANK = {"dev": 0, "t": 0, "a": 1, "alpha": 1, "b": 2, "beta": 2, "c": 3, "rc": 3, "pre": 3, "post": 5}
_END = (4, 0)
_PAD = 6


class VersionError(ValueError):
    """A string that is not a version."""


_BODY = re.compile(r"v?[0-9](?:[._-]?[0-9a-z])*", re.ASCII)
# PEP 440's local version label (after '+'): alphanumerics separated by single '.', '_' or '-' (linear, as _BODY).
_LOCAL = re.compile(r"[0-9a-z]+(?:[._-][0-9a-z]+)*", re.ASCII)


def _short(text: object) -> str:
    shown = repr(text)
    return shown if len(shown) <= 80 else shown[:77] + "..."


@total_ordering
class V:
    """A comparable version that keeps its original spelling for display."""

    __slots__ = ("text", "release", "chain", "local", "_key")

    def __init__(self, text: str):
        if isinstance(text, V):
            text = text.text
        if not isinstance(text, str) or not text.strip():
            raise VersionError(f"not a version: {text!r}")
        self.text = text.strip()
        if len(self.text) > MAX_LEN or not self.text.isascii():
            # ASCII only: int() would read Unicode digits ("８", "١") as numbers.
            raise VersionError(f"not a version: {_short(text)}")
        body, plus, local = self.text.lower().partition("+")
        # One character per repetition and one way to match each: linear time, even on long invalid strings
        # (the same language as v?digit(sep? alnum+)*).
        if not _BODY.fullmatch(body):
            raise VersionError(f"not a version: {text!r}")
        if plus and not _LOCAL.fullmatch(local):
            # The local part reaches pip lines and Dockerfile RUN lines as written: held to PEP 440's grammar.
            raise VersionError(f"not a version: {text!r} (a local part after '+' is letters and digits"
                               " separated by '.', '_' or '-')")
        tokens = _TOKEN.findall(body.lstrip("v"))
        release: list[int] = []
        i = 0
        while i < len(tokens) and tokens[i].isdigit():
            release.append(int(tokens[i]))
            i += 1
        chain: list[tuple[int, int]] = []
        while i < len(tokens):
            tok = tokens[i]
            if tok.isdigit():
                # A bare number after a stage is a patch of it: 25.0.rc1.1
                chain.append((_RANK["post"], int(tok)))
                i += 1
                continue
            if tok not in _RANK:
                raise VersionError(f"not a version: {text!r} (unknown part {tok!r})")
            num = 0
            if i + 1 < len(tokens) and tokens[i + 1].isdigit():
                num = int(tokens[i + 1])
                i += 1
            chain.append((_RANK[tok], num))
            i += 1
        if not release:
            raise VersionError(f"not a version: {text!r}")
        self.release = tuple(release)
        self.chain = tuple(chain)
        self.local = local or None
        padded = self.release + (0,) * max(0, _PAD - len(self.release))
        self._key = (padded, self.chain + (_END,))

    @property
    def key(self) -> tuple:
        return self._key

    @property
    def is_final(self) -> bool:
        """True unless this is an alpha, beta, rc, dev or test build."""
        return all(rank >= _RANK["post"] for rank, _ in self.chain)

    def public(self) -> V:
        """The version without its local part (``2.5.1+cpu`` -> ``2.5.1``)."""
        return V(self.text.split("+", 1)[0]) if self.local else self

    def minor(self) -> tuple[int, int]:
        rel = self.release + (0, 0)
        return rel[0], rel[1]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, str):
            try:
                other = V(other)
            except VersionError:
                return False
        return isinstance(other, V) and self._key == other._key

    def __lt__(self, other: V | str) -> bool:
        if isinstance(other, str):
            other = V(other)
        return self._key < other._key

    def __hash__(self) -> int:
        return hash(self._key)

    def __repr__(self) -> str:
        return f"V({self.text!r})"

    def __str__(self) -> str:
        return self.text


@lru_cache(maxsize=8192)
def parse(text: str) -> V:
    """A cached V: versions are immutable and the same strings recur constantly."""
    return V(text)


def is_version(text: object) -> bool:
    try:
        V(text)  # type: ignore[arg-type]
        return True
    except VersionError:
        return False


_POST = _RANK["post"]


def _prefix_match(v: V, prefix: V) -> bool:
    n = len(prefix.release)
    if v.release[:n] != prefix.release:
        # "8.5" is 8.5.0 and so starts with "8.5.0", but 23.0.rc2 (a pre-release
        # of 23.0) does not start with "23.0.0".
        padded = (v.release + (0,) * n)[:n] == prefix.release
        if not padded or any(rank < _POST for rank, _ in v.chain):
            return False
    # "8.0.*" matches 8.0.RC1 and 8.0.0; a prefix with its own chain must match it too.
    return not prefix.chain or v.chain[: len(prefix.chain)] == prefix.chain


def is_patch_of(v: V, base: V) -> bool:
    """True if ``v`` is a patch build of ``base``: 25.0.rc1.1 of 25.0.RC1, 24.1.0.3 of 24.1.0."""
    if v == base:
        return False
    if not base.chain and len(v.release) > len(base.release) and v.release[: len(base.release)] == base.release:
        return all(rank >= _POST for rank, _ in v.chain)
    if v.key[0] != base.key[0] or v.chain[: len(base.chain)] != base.chain or len(v.chain) <= len(base.chain):
        return False
    return all(rank == _POST for rank, _ in v.chain[len(base.chain) :])


class Spec:
    """One spec term (see the module docstring); ``matches(V)``."""

    __slots__ = ("text", "_tests")

    def __init__(self, text: str):
        if not isinstance(text, str) or not text.strip():
            raise VersionError(f"empty version spec: {text!r}")
        self.text = text.strip()
        if len(self.text) > 16 * MAX_LEN:
            raise VersionError(f"version spec too long: {_short(text)}")
        self._tests = [self._term(t.strip()) for t in self.text.split(",")]

    @staticmethod
    def _bound(text: str):
        if text.endswith(".*"):
            return V(text[:-2]), True
        return V(text), False

    def _term(self, term: str):
        if ".." in term:
            lo_text, hi_text = (p.strip() for p in term.split("..", 1))
            lo, _ = self._bound(lo_text)
            hi, hi_wild = self._bound(hi_text)
            if hi_wild:
                return lambda v: v >= lo and (v <= hi or _prefix_match(v, hi))
            return lambda v: lo <= v <= hi
        for op in (">=", "<=", "==", ">", "<"):
            if term.startswith(op):
                bound, wild = self._bound(term[len(op) :].strip())
                if wild and op != "==":
                    raise VersionError(f"'.*' only with '==' or alone: {term!r}")
                if op == "==" and wild:
                    return lambda v, b=bound: _prefix_match(v, b)
                b = bound
                return {
                    ">=": lambda v, b=b: v >= b,
                    "<=": lambda v, b=b: v <= b,
                    "==": lambda v, b=b: v == b,
                    ">": lambda v, b=b: v > b,
                    # As in PEP 440: "<25" excludes 25.0.rc1, a pre-release of 25 itself.
                    "<": lambda v, b=b: v < b and not (b.is_final and v.key[0] == b.key[0]),
                }[op]
        bound, wild = self._bound(term)
        if wild:
            return lambda v: _prefix_match(v, bound)
        return lambda v: v == bound

    def matches(self, v: V | str) -> bool:
        if not isinstance(v, V):
            v = V(v)
        return all(t(v) for t in self._tests)

    def __repr__(self) -> str:
        return f"Spec({self.text!r})"

    def __str__(self) -> str:
        return self.text


@lru_cache(maxsize=1024)
def spec(text: str) -> Spec:
    """A cached Spec (the matrices repeat a few hundred spec strings)."""
    return Spec(text)


def any_match(specs: list[str] | tuple[str, ...] | None, v: V | str) -> bool:
    """True if ``v`` matches any spec in the list (an OR of terms)."""
    if not specs:
        return False
    version = v if isinstance(v, V) else parse(v)
    return any(spec(s).matches(version) for s in specs)


class PyRange:
    """An inclusive Python range written ``3.9-3.11``; ``3.11`` covers any 3.11.x."""

    __slots__ = ("text", "lo", "hi")

    def __init__(self, text: str):
        if not isinstance(text, str):
            raise VersionError(f"Python range must be a string like '3.9-3.11', got {text!r}")
        self.text = text.strip()
        lo, sep, hi = self.text.partition("-")
        self.lo = V(lo).minor()
        self.hi = V(hi).minor() if sep else self.lo

    def __contains__(self, python: str | V) -> bool:
        v = python if isinstance(python, V) else parse(python)
        return self.lo <= v.minor() <= self.hi

    def __str__(self) -> str:
        return self.text


@lru_cache(maxsize=512)
def py_range(text: str) -> PyRange:
    """A cached PyRange."""
    return PyRange(text)


def sort_versions(texts, reverse: bool = False) -> list[str]:
    return sorted(texts, key=lambda t: V(t).key, reverse=reverse)


def span(texts) -> str:
    """Short human summary of a set of versions: ``8.0.RC2–8.3.RC1`` or a list."""
    items = sort_versions(set(texts))
    if not items:
        return "none"
    if len(items) <= 4:
        return ", ".join(items)
    return f"{items[0]}–{items[-1]} ({len(items)} versions)"
