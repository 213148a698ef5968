"""The extra ids a catalog model answers to: exact ids, and globs where `*` stands for any run
of characters (`claude-haiku-*`).

Precedence, from the request's id: a model's own id, then an exact alias, then the matching
glob with the most literal characters (`claude-haiku-*` beats `claude-*`). Two models' globs
with as many literal characters may not both match one id: the catalog refuses them, so no id
is ever decided by row order."""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import cache
from typing import Protocol, TypeVar

from django.core.exceptions import ValidationError

# A public id's characters, plus `*` and `/`: clients name models by hub paths too (Ollama's
# `hf.co/owner/repo:Q4_K_M`, what an /api/pull adds as an alias).
ALIAS = re.compile(r"^[A-Za-z0-9*][A-Za-z0-9._:/*-]{0,127}$")


class Aliased(Protocol):
    public_id: str
    aliases: list[str]


Entry = TypeVar("Entry", bound=Aliased)


def is_glob(alias: str) -> bool:
    return "*" in alias


def literal_length(glob: str) -> int:
    """How specific a glob is: its characters other than `*`."""
    return len(glob.replace("*", ""))


@cache
def _regex(glob: str) -> re.Pattern[str]:
    return re.compile("".join(".*" if c == "*" else re.escape(c) for c in glob))


def glob_matches(glob: str, model_id: str) -> bool:
    return _regex(glob).fullmatch(model_id) is not None


def globs_overlap(a: str, b: str) -> bool:
    """Whether some id matches both globs. Walks both patterns at once: a `*` on either side
    may stand for nothing or swallow the other side's next character (or its `*`)."""
    reachable = {(0, 0)}
    frontier = [(0, 0)]
    while frontier:
        i, j = frontier.pop()
        if i == len(a) and j == len(b):
            return True
        steps = []
        if i < len(a) and a[i] == "*":
            steps += [(i + 1, j)] + ([(i, j + 1)] if j < len(b) else [])
        if j < len(b) and b[j] == "*":
            steps += [(i, j + 1)] + ([(i + 1, j)] if i < len(a) else [])
        if i < len(a) and j < len(b) and a[i] == b[j] != "*":
            steps.append((i + 1, j + 1))
        for step in steps:
            if step not in reachable:
                reachable.add(step)
                frontier.append(step)
    return False


def validate_alias_list(value: object) -> None:
    """A JSON list of distinct ids or globs; `*` alone is what the default model is for."""
    if not isinstance(value, list) or not all(isinstance(a, str) for a in value):
        raise ValidationError('Give a JSON list of ids, e.g. ["claude-sonnet-4-5", "gpt-*"].')
    for alias in value:
        if not ALIAS.match(alias):
            raise ValidationError(
                f"{alias!r}: use letters, digits, '.', '_', ':', '/', '-' and '*' (no spaces), at "
                "most 128 characters."
            )
        if not alias.replace("*", ""):
            raise ValidationError(
                f"{alias!r} would match every id: tick 'default for unknown ids' instead."
            )
    if len(set(value)) != len(value):
        raise ValidationError("An alias is listed twice.")


def alias_conflicts(entry: Aliased, others: Iterable[Aliased]) -> list[str]:
    """Why `entry`'s id and aliases cannot sit beside the other catalog rows ([] if they can)."""
    problems = []
    own = [a for a in entry.aliases if not is_glob(a)]
    if entry.public_id in own:
        problems.append(f"{entry.public_id!r} is this model's own id, not an alias.")
    for other in others:
        theirs = {other.public_id, *(a for a in other.aliases if not is_glob(a))}
        for alias in own:
            if alias in theirs:
                problems.append(f"{alias!r} already names the model {other.public_id!r}.")
        if entry.public_id in other.aliases:
            problems.append(f"{entry.public_id!r} is an alias of the model {other.public_id!r}.")
        problems += _glob_ties(entry, other)
    return problems


def _glob_ties(entry: Aliased, other: Aliased) -> list[str]:
    return [
        f"{mine!r} and {other.public_id!r}'s {theirs!r} are equally specific and both match "
        "some ids: make one longer, or list the ids exactly."
        for mine in entry.aliases
        if is_glob(mine)
        for theirs in other.aliases
        if is_glob(theirs)
        and literal_length(mine) == literal_length(theirs)
        and globs_overlap(mine, theirs)
    ]


# Ollama's default tag: `smollm2` and `smollm2:latest` are one name there, so at every door here.
LATEST = ":latest"


def same_names(model_id: str) -> tuple[str, str]:
    """The name as sent, then its twin with or without Ollama's `:latest`."""
    if model_id.endswith(LATEST):
        return model_id, model_id.removesuffix(LATEST)
    return model_id, model_id + LATEST


def named_by(model_id: str, entries: Iterable[Entry]) -> Entry | None:
    """The entry `model_id` names, as every door resolves it: a model's own id (the name or
    its `:latest` twin), else an exact alias (likewise), else the most specific glob matching
    the name as sent. The default for unknown ids is the caller's to add."""
    rows = list(entries)
    names = same_names(model_id)
    for name in names:
        own = next((entry for entry in rows if entry.public_id == name), None)
        if own is not None:
            return own
    for name in names:
        exact = next((entry for entry in rows if name in entry.aliases), None)
        if exact is not None:
            return exact
    return best_match(model_id, rows)


def source_aliases(names: Iterable[str], entry: Aliased, others: Iterable[Aliased]) -> list[str]:
    """Of the names an import's source calls a model by (Ollama's `smol:135m`, LM Studio's
    `publisher/repo/file.gguf`), those that can be aliases of `entry`: valid, not its id (nor
    its id's `:latest` twin) nor one of its aliases, and naming no other model."""
    rows = list(others)
    taken = {row.public_id for row in rows} | {a for row in rows for a in row.aliases}
    kept: list[str] = []
    for name in names:
        # A twin counts: `x:latest` beside another model's id `x` would name that model, and
        # beside this model's own id `x` it names it already.
        twins = same_names(name)
        free = not taken.intersection(twins) and entry.public_id not in twins
        new = name not in entry.aliases and name not in kept
        if ALIAS.match(name) and not is_glob(name) and free and new:
            kept.append(name)
    return kept


def best_match(model_id: str, entries: Iterable[Entry]) -> Entry | None:
    """The entry `model_id` names through an alias: an exact one, else the most specific
    glob (the caller has already looked for a model whose own id it is)."""
    best: tuple[int, Entry] | None = None
    for entry in entries:
        for alias in entry.aliases:
            if alias == model_id:
                return entry
            if is_glob(alias) and glob_matches(alias, model_id):
                rank = literal_length(alias)
                if best is None or rank > best[0]:
                    best = (rank, entry)
    return best[1] if best else None


def add_alias_argument(parser) -> None:
    """`--alias X`, repeatable: add_model's and import_gguf's, alike."""
    parser.add_argument(
        "--alias",
        action="append",
        default=[],
        dest="aliases",
        help="another id clients may send for it, or a glob (claude-*); repeatable",
    )
