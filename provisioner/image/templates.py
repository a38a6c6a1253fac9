"""The templates/ directory: the Jinja2 environment (strict: an undefined name fails), its quoting filters
for Dockerfile words and shell words, rendering one template, and copying a file as is.

Dockerfile, pip/git configuration, entrypoint and project templates all live in templates/; every module
that writes one of them goes through here.
"""

from __future__ import annotations

from provisioner.errors import ProvisionError


def _dockerfile_quote(value: object) -> str:
    """A double-quoted Dockerfile word (LABEL/ENV values): no variable expansion, no escapes lost."""
    text = str(value)
    text = text.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$").replace("\n", "\\n")
    return f'"{text}"'


def _one_line(value: object) -> object:
    """Every ``{{ value }}`` a template writes: a value that could end its line (a newline, any control
    character) is refused, so nothing from a stack, an overlay or an option can add a Dockerfile instruction,
    a pip.conf setting or a script line. Multi-line text a template builds itself (its macros) is Markup."""
    import markupsafe

    if isinstance(value, markupsafe.Markup) or not isinstance(value, str):
        return value
    from provisioner import validate

    if validate.has_control(value):
        raise validate.Invalid(f"refusing to write {value[:60]!r}... into a rendered file: it holds a newline or"
                               " control character")
    return value


def _own(value: object):
    import markupsafe

    return markupsafe.Markup(value)


def _shell_quote(value: object) -> str:
    import shlex

    return shlex.quote(str(value))


def template_env():
    """The Jinja2 environment for templates/: a typo (an undefined name) fails the render."""
    import jinja2

    from provisioner.paths import data_dir

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(data_dir("templates"))),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )
    env.finalize = _one_line
    # `own`: text the template built itself from its own macros (several lines on purpose); never a value.
    env.filters["own"] = _own
    env.filters["dq"] = _dockerfile_quote
    env.filters["shq"] = _shell_quote
    return env


def render_template(name: str, **values) -> str:
    """templates/<name> rendered with `values`; a template error is one ProvisionError naming the file."""
    return render_in(template_env(), name, values)


def render_in(env, name: str, values: dict, what: str = "") -> str:
    """templates/<name> rendered in `env` (template_env() or one with more filters); every template error is
    one ProvisionError naming the file (and line); `what` says who asked for a template that is missing."""
    import jinja2

    try:
        return env.get_template(name).render(**values)
    except jinja2.TemplateNotFound as exc:
        raise ProvisionError(f"templates/{exc.name}: not found{f' ({what})' if what else ''}") from None
    except jinja2.UndefinedError as exc:
        raise ProvisionError(f"templates/{name}: {exc.message}") from None
    except jinja2.TemplateError as exc:
        lineno = getattr(exc, "lineno", None)  # TemplateSyntaxError has one
        where = f":{lineno}" if lineno else ""
        raise ProvisionError(f"templates/{name}{where}: {exc}") from None


def raw(name: str) -> bytes:
    """A file from templates/ copied as is (scripts that are not Jinja templates)."""
    from provisioner.paths import data_dir

    return (data_dir("templates") / name).read_bytes()
