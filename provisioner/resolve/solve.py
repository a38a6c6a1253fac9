"""Constraints -> one consistent Stack, or a refusal with the real reasons and the nearest valid stacks.

The candidates of the card's chip (candidates.py) are filtered by every user
constraint; the best survivor becomes the Stack (stack.py). When nothing
survives, explain.py says which constraints cannot be met or cannot go
together, and the smallest sets of constraints whose removal gives a stack are
offered as alternatives. A card that cannot train is refused for training, with
the stacks of the matrix's training fallback cards offered instead.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from provisioner.errors import ResolveError
from provisioner.resolve.candidates import Constraint, Context, best, build_constraints, penalties
from provisioner.resolve.explain import explain_failure
from provisioner.resolve.request import Request
from provisioner.resolve.stack import make_stack

TYPE_CHECKING = False
if TYPE_CHECKING:
    from provisioner.matrix.loader import Matrix
    from provisioner.shapes import Candidate, Stack

MAX_ALTERNATIVES = 3


@dataclass
class Outcome:
    """What solving one card gave: the chosen candidate, or the reasons and the relaxed alternatives."""

    ctx: Context
    cand: Candidate | None
    reasons: list[str]
    alternatives: list[tuple[list[str], Context, Candidate]]  # (dropped flags, ctx, candidate)


def _masks(ctx: Context, cons: list[Constraint]) -> dict[str, list[bool]]:
    base = ctx.base()
    return {c.name: [c.test(x) for x in base] for c in cons}


def _pick(ctx: Context, masks: dict[str, list[bool]], names: list[str]) -> Candidate | None:
    base = ctx.base()
    alive = [x for i, x in enumerate(base) if all(masks[n][i] for n in names)]
    return best(ctx, alive) if alive else None


def solve(matrix: Matrix, req: Request, card: dict, family: dict) -> Outcome:
    ctx = Context(matrix, req, card, family)
    cons = build_constraints(ctx)
    masks = _masks(ctx, cons)
    names = [c.name for c in cons]
    found = _pick(ctx, masks, names)
    if found is not None:
        return Outcome(ctx, found, [], [])
    reasons = explain_failure(ctx, cons, masks)
    alternatives: list = []
    minimal: list[set] = []
    for size in range(1, min(3, len(cons)) + 1):
        for drop in itertools.combinations(cons, size):
            dropped = {c.name for c in drop}
            if any(s <= dropped for s in minimal):
                continue
            cand = _pick(ctx, masks, [n for n in names if n not in dropped])
            if cand is not None:
                minimal.append(dropped)
                alternatives.append(([c.flag for c in drop], ctx, cand))
        if len(alternatives) >= MAX_ALTERNATIVES:
            break
    # fewest constraints dropped first; among those, the stack with fewest soft problems
    alternatives.sort(key=lambda a: (len(a[0]), len(penalties(a[1], a[2])) + len(a[2].get("unlisted", []))))
    return Outcome(ctx, None, reasons, alternatives[:MAX_ALTERNATIVES])


def training_refusal(family: dict, card: dict) -> str | None:
    if card.get("training") is False:
        return f"{card['name']} is an inference product; it cannot be used for training"
    if not family["training"]:
        note = family.get("training_note") or "it is an inference chip"
        return f"{card['name']} ({family['name']}) cannot train: {note}"
    return None


def resolve(matrix: Matrix, req: Request) -> Stack:
    """Return a Stack dict, or raise ResolveError with reasons and alternative stacks."""
    card, family, via_alias = matrix.lookup_card(req.card)
    task = req.task or matrix.policy.get("default_task", "train")
    req = req.replace(task=task)
    refusal = training_refusal(family, card) if task == "train" else None
    outcome = solve(matrix, req, card, family)
    if refusal is None and outcome.cand is not None:
        return make_stack(outcome.ctx, outcome.cand, via_alias=via_alias)

    reasons = [refusal] if refusal else list(outcome.reasons)
    alternatives = [] if refusal else list(outcome.alternatives)
    if refusal:
        # Say what else is wrong on the hardware that can train, and offer that.
        for fallback in matrix.policy.get("training_fallback_cards", []):
            fcard, ffam, _ = matrix.lookup_card(fallback)
            fout = solve(matrix, req.replace(card=fcard["id"]), fcard, ffam)
            if fout.cand is not None:
                alternatives.append(([f"--card {req.card}"], fout.ctx, fout.cand))
            else:
                reasons += [f"on {fcard['id']} too: {r}" for r in fout.reasons]
                alternatives += [([f"--card {req.card}", *d], c, x) for d, c, x in fout.alternatives]
            if alternatives:
                break
    alt_stacks = []
    for dropped, actx, acand in alternatives[:MAX_ALTERNATIVES]:
        # An alternative that drops `--with X` is a stack without X (its candidate was chosen without it).
        # (its flag may carry a note: "--with mindspeed-llm (pinned refs)")
        gone = {flag.split()[1] for flag in dropped if flag.startswith("--with ")}
        if gone:
            actx = Context(actx.m, actx.req.replace(extras=tuple(e for e in actx.req.extras if e not in gone)),
                           actx.card, actx.family)
        stack = make_stack(actx, acand, via_alias=None)
        stack["relaxed"] = dropped
        alt_stacks.append(stack)
    summary = reasons[0] if reasons else "no stack satisfies the request"
    raise ResolveError(summary, reasons=reasons, alternatives=alt_stacks)
