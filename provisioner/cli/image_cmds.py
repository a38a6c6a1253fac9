"""`provision render` and `provision build`."""

from __future__ import annotations

import click

from provisioner.cli.common import emit_json, json_option, pop_host, pop_resolve, resolve_options

RENDER_SCHEMA = "provision.render/1"
BUILD_SCHEMA = "provision.build/1"


def register(group: click.Group) -> None:
    group.add_command(render_cmd)
    group.add_command(build_cmd)


def _image_options(f):
    options = [
        click.option("--recipe", help="Image recipe from images/: pytorch (default), mindspeed-llm, mindspore."),
        click.option("--user-gid", type=click.IntRange(1, 2**31 - 1),
                     help="Add a non-root user whose group id is the host's HwHiAiUser group id (see `id HwHiAiUser`)."),
        click.option("--user-uid", type=click.IntRange(1, 2**31 - 1), default=None,
                     help="uid of that user (default 1000; needs --user-gid)."),
        click.option("--source", "sources", multiple=True, metavar="NAME=PATH|URL",
                     help="Take a framework checkout (mindspeed, megatron, mindspeed_llm, mindspeed_rl, vllm_ascend,"
                          " mindformers) from a local git repository or another URL; verified against the commit the"
                          " matrix pins (repeatable)."),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def _prepare(overlays, kwargs: dict):
    """Resolve the stack for the recipe and render the context (in memory)."""
    from provisioner.cli import hoststack
    from provisioner.errors import ProvisionError, ResolveError
    from provisioner.image import recipes, render, sources

    recipe_name = kwargs.pop("recipe")
    given = sources.parse(kwargs.pop("sources", ()))
    gid, uid = kwargs.pop("user_gid"), kwargs.pop("user_uid")
    if uid is not None and gid is None:
        raise ProvisionError("--user-uid needs --user-gid (the group that opens the NPU device nodes)")
    plain = pop_resolve(kwargs)
    options = recipes.request_options(recipe_name, plain)
    host = pop_host(kwargs)
    try:
        matrix, stack, record = hoststack.stack_for(overlays, options, host)
        if recipe_name is None and stack["framework"] == "mindspore" and "mindformers" not in stack["extras"]:
            # The MindSpore image carries MindSpore Transformers: resolve with what its recipe needs.
            recipe_name = "mindspore"
            matrix, stack, record = hoststack.stack_for(overlays, recipes.request_options(recipe_name, plain), host)
    except ResolveError as exc:
        hoststack.print_notes(getattr(exc, "host", None))
        raise ProvisionError(f"no stack: {exc} (`provision resolve` with the same options shows why and the"
                             " nearest valid stacks)") from None
    hoststack.print_notes(record)
    recipe = recipes.choose(stack, recipe_name)
    user = render.User(uid=uid or 1000, gid=gid) if gid is not None else None
    return render.render(matrix, stack, recipe, user=user, sources=given)


@click.command("render")
@resolve_options
@_image_options
@click.option("-o", "--output", "output", required=True, type=click.Path(file_okay=False),
              help="Directory to write the build context to (created; a previous render there is replaced).")
@json_option
def render_cmd(overlays, output, as_json, **kwargs):
    """Write a complete, byte-stable Docker build context for a stack.

    The context holds the Dockerfile, requirements.lock (and one requirements
    file per layer), stack.json (the manifest), the files the image copies and
    this project's source. The same inputs give the same bytes. Build it with
    `provision build` (or `docker build` with the classic builder).
    """
    from provisioner.image import render

    ctx = _prepare(overlays, kwargs)
    path = render.write(ctx, output)
    if as_json:
        emit_json({"schema": RENDER_SCHEMA, "path": str(path), "tag": ctx.tag, "manifest": ctx.manifest})
    else:
        click.echo(f"{path}: build context for {ctx.tag}")
        click.echo(f"  recipe {ctx.manifest['recipe']['name']}, stack {ctx.manifest['stack_id']},"
                   f" package set {ctx.manifest['package_set']['id']}, base {ctx.manifest['base_image']}")
        # A host without a driver limits nothing: its one line went to stderr, the stack explains no host.
        host_line = ((ctx.manifest.get("stack") or {}).get("explain") or {}).get("host")
        if host_line:
            click.echo(f"  host {host_line}")
    return 0


@click.command("build")
@resolve_options
@_image_options
@click.option("--tag", "tags", multiple=True, help="Also tag the image T (repeatable); the first is printed.")
@click.option("--wheelhouse", type=click.Path(), help="Directory of wheels pip looks in first (with --offline, only there).")
@click.option("--offline", is_flag=True, help="Install only from --wheelhouse: no index is contacted.")
@click.option("--pip-index-url", help="Package index instead of PyPI (builder stages only).")
@click.option("--extra-index-url", "extra_index_urls", multiple=True, help="Additional package index (repeatable).")
@click.option("--trusted-ca", type=click.Path(), help="PEM CA bundle the builder stages trust (corporate proxy or mirror); never in the image.")
@click.option("--network", help="Network for the build's RUN steps: host, bridge, none (default: the engine's).")
@click.option("--no-cache", is_flag=True, help="Build every layer again.")
@click.option("--no-pull", is_flag=True, help="Do not pull a base image that is not local.")
@click.option("-v", "--verbose", is_flag=True, help="Show the output of every build step.")
@json_option
def build_cmd(overlays, tags, wheelhouse, offline, pip_index_url, extra_index_urls, trusted_ca, network, no_cache,
              no_pull, verbose, as_json, **kwargs):
    """Build the image for a stack with the local Docker engine and print its tag.

    The tag is deterministic: <repository>:<cann>-<chip>-torch<ver>-py<ver>-<stack id>.
    Progress (step, elapsed time) goes to stderr; a failing step shows the end
    of its output. Exit code 1 when a build step fails, 2 for bad input.
    """
    from provisioner.image import build

    opts = build.BuildOptions(
        wheelhouse=wheelhouse, pip_index_url=pip_index_url, extra_index_urls=tuple(extra_index_urls),
        trusted_ca=trusted_ca, network=network, offline=offline, no_cache=no_cache, pull=not no_pull,
        tags=tuple(tags),
    )
    build.check_options(opts)
    ctx = _prepare(overlays, kwargs)
    result = build.build(ctx, opts, verbose=verbose)
    click.echo(f"built {result.image_id[:19]} in {result.seconds:.0f}s", err=True)
    if as_json:
        emit_json({"schema": BUILD_SCHEMA, **result.to_dict(), "recipe": ctx.manifest["recipe"]["name"],
                   "stack_id": ctx.manifest["stack_id"], "stack": ctx.manifest["stack"]})
    else:
        click.echo(result.tag)
    return 0
