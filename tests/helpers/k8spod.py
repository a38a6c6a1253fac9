"""What the kubelet makes of a pod template's container: its environment for one pod, and its args expanded.

Enough of Kubernetes to run a rendered pod's command elsewhere (a unit test's comparison, two local
containers): `value` entries as given, `valueFrom.fieldRef` from the pod's fields (its annotations, its
status.hostIP), and `$(NAME)` references in command/args expanded from that environment with the API's
rules (k8s.io/kubernetes third_party/forked/golang/expansion: `$$` is a literal `$`, a reference to an
undefined name stays as written, any other `$` is kept).
"""

from __future__ import annotations

import re

_ANNOTATION = re.compile(r"^metadata\.annotations\['([^']+)'\]$")


def environment(container: dict, annotations: dict[str, str], host_ip: str) -> dict[str, str]:
    """The container's variables in the pod whose annotations and host IP are given."""
    env: dict[str, str] = {}
    for e in container.get("env", []):
        if "value" in e:
            env[e["name"]] = expand(e["value"], env)  # a value may refer to variables listed before it
            continue
        path = e["valueFrom"]["fieldRef"]["fieldPath"]
        m = _ANNOTATION.match(path)
        if m:
            env[e["name"]] = annotations[m[1]]
        elif path == "status.hostIP":
            env[e["name"]] = host_ip
        else:
            raise AssertionError(f"field {path} is not simulated here")
    return env


def expand(text: str, env: dict[str, str]) -> str:
    out, i = [], 0
    while i < len(text):
        c = text[i]
        if c != "$" or i + 1 == len(text):
            out.append(c)
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "$":
            out.append("$")
            i += 2
        elif nxt == "(":
            end = text.find(")", i + 2)
            if end < 0:
                out.append(text[i:])
                break
            name = text[i + 2:end]
            out.append(env[name] if name in env else text[i:end + 1])
            i = end + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def args(container: dict, env: dict[str, str]) -> list[str]:
    """The container's command line (command + args) as the kubelet starts it."""
    return [expand(a, env) for a in [*container.get("command", []), *container.get("args", [])]]
