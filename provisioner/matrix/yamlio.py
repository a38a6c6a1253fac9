"""Read YAML keeping the line of every mapping, so errors can say file:line."""

from __future__ import annotations

from pathlib import Path

from provisioner.errors import MatrixError


class Node(dict):
    """A mapping that remembers where it came from (``line``) and where each key was."""

    __slots__ = ("file", "line", "key_lines")
    file: str
    line: int
    key_lines: dict[str, int]

    def where(self, key: str | None = None) -> str:
        line = self.key_lines.get(key, self.line) if key else self.line
        return f"{self.file}:{line}"


def load(path: Path, label: str | None = None):
    """Parse one YAML file; mappings become :class:`Node` with 1-based lines."""
    import yaml

    base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    shown = label or str(path)

    class Loader(base):  # type: ignore[misc, valid-type]
        pass

    def construct_mapping(loader, node, deep=False):
        loader.flatten_mapping(node)
        out = Node()
        out.file = shown
        out.line = node.start_mark.line + 1
        out.key_lines = {}
        for key_node, value_node in node.value:
            key = loader.construct_object(key_node, deep=True)
            if not isinstance(key, str):
                raise MatrixError(f"{shown}:{key_node.start_mark.line + 1}: keys must be text, got {key!r}")
            if key in out:
                raise MatrixError(f"{shown}:{key_node.start_mark.line + 1}: duplicate key {key!r}")
            out[key] = loader.construct_object(value_node, deep=True)
            out.key_lines[key] = key_node.start_mark.line + 1
        return out

    Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, construct_mapping)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise MatrixError(f"{shown}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise MatrixError(f"{shown}: not UTF-8 text") from None
    try:
        return yaml.load(text, Loader=Loader)  # noqa: S506 - SafeLoader subclass
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else 0
        raise MatrixError(f"{shown}:{line}: invalid YAML: {exc.problem or exc.context}") from None
    except yaml.YAMLError as exc:
        raise MatrixError(f"{shown}: invalid YAML: {exc}") from None
