"""The one YAML reader for text from outside (matrix overlays, trainer configs, job specs, stack files):
safe tags only, and bounded before anything is built.

A pass over the parser's events (libyaml when present) first measures the document: nesting deeper than
MAX_DEPTH, more than MAX_ALIASES aliases, or more than MAX_NODES nodes once every alias is expanded (a
"billion laughs" bomb is a few hundred bytes that expand to billions) is refused with one line. Only then
is the document built, with the caller's loader class. Base level: imports yaml (lazily) and errors only.
"""

from __future__ import annotations

from provisioner.errors import ProvisionError

MAX_DEPTH = 64
MAX_ALIASES = 1000
MAX_NODES = 250_000


class YamlLimitError(ProvisionError):
    """A YAML document beyond the limits (one line, exit 2)."""


def base_loader():
    """The fastest safe loader class (libyaml's when installed)."""
    import yaml

    return getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def check(text: str, what: str, loader=None) -> None:
    """Refuse `text` (YamlLimitError) when it nests, aliases or expands beyond the limits.

    YAML syntax errors are left to the real load, which reports them with their line.
    """
    import yaml

    events = (yaml.MappingStartEvent, yaml.SequenceStartEvent)
    ends = (yaml.MappingEndEvent, yaml.SequenceEndEvent)
    anchors: dict[str, int] = {}
    open_: list[list] = [[None, 0]]  # [anchor, expanded size] per open collection
    aliases = 0
    try:
        for ev in yaml.parse(text, Loader=loader or base_loader()):
            if isinstance(ev, events):
                if len(open_) > MAX_DEPTH:
                    raise YamlLimitError(f"{what}: YAML nested deeper than {MAX_DEPTH} levels")
                open_.append([ev.anchor, 1])
            elif isinstance(ev, ends):
                anchor, size = open_.pop()
                if anchor:
                    anchors[anchor] = size
                open_[-1][1] += size
            elif isinstance(ev, yaml.ScalarEvent):
                if ev.anchor:
                    anchors[ev.anchor] = 1
                open_[-1][1] += 1
            elif isinstance(ev, yaml.AliasEvent):
                aliases += 1
                if aliases > MAX_ALIASES:
                    raise YamlLimitError(f"{what}: more than {MAX_ALIASES} YAML aliases")
                open_[-1][1] += anchors.get(ev.anchor or "", 1)
            else:
                continue
            if open_[0][1] + sum(s for _, s in open_[1:]) > MAX_NODES:
                raise YamlLimitError(f"{what}: YAML expands to more than {MAX_NODES} nodes (aliases)")
    except yaml.YAMLError:
        return
    except RecursionError:
        raise YamlLimitError(f"{what}: YAML nested too deeply") from None


def load(text: str, what: str, loader=None):
    """`text` checked (see `check`), then loaded with `loader` (default: the safe loader); YAML errors are
    one ProvisionError naming `what` and the line."""
    import yaml

    cls = loader or base_loader()
    check(text, what, cls)
    try:
        return yaml.load(text, Loader=cls)  # noqa: S506 - safe loaders only
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = f":{mark.line + 1}" if mark else ""
        raise ProvisionError(f"{what}{line}: invalid YAML: {exc.problem or exc.context}") from None
    except yaml.YAMLError as exc:
        raise ProvisionError(f"{what}: invalid YAML: {str(exc).splitlines()[0] if str(exc) else 'unreadable'}") from None
    except RecursionError:
        raise YamlLimitError(f"{what}: YAML nested too deeply") from None
