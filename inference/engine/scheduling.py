"""Who runs next, and how much prompt reading one step may do.

Fair shares: a key, and a request within its key, may hold at most its share of the batch's
slots while others want them (max_batch / keys with work, split again between that key's
requests), and free slots go to whoever holds fewest (no slot idles: with nobody below their
share waiting, the rest go in order). A request that took the whole batch while alone gives
way to a newcomer below its share at once where it can: a prompt it is still reading is set
aside, its cache so far kept (preemptible); decoding sequences are never interrupted, so their
slots come back as they end.

Prefill budget: prompt reading is paced by time, not tokens, so it adapts to the machine. While
streams decode, a step reads about as many prompt tokens as fit in `prefill_share` of the step
(running streams keep their cadence: with the default 0.5 a step at most doubles); with
nothing decoding it reads for up to IDLE_STEP_SECONDS (cancellations land between steps).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from inference.engine.sequence import Sequence

IDLE_STEP_SECONDS = 0.5
SMOOTHING = 0.3  # weight of the newest measurement in the running averages
MIN_CHUNK = 16  # tokens: below this a forward pass is mostly fixed cost


def owner_of(sequence: Sequence) -> str:
    return sequence.job.owner


def group_of(sequence: Sequence) -> str:
    return sequence.job.group or str(id(sequence.job))


def admit(waiting: list[Sequence], running: list[Sequence], slots: int) -> list[Sequence]:
    """Picks from `waiting` (oldest first) the sequences to start now, at most `slots`."""
    chosen: list[Sequence] = []
    by_owner = Counter(owner_of(s) for s in running)
    by_group = Counter(group_of(s) for s in running)
    capacity = len(running) + slots
    candidates = list(waiting)
    while candidates and len(chosen) < slots:
        shares = _shares(candidates, running + chosen, capacity)
        best = None
        for s in candidates:
            if by_group[group_of(s)] >= shares[group_of(s)]:
                continue
            rank = (by_owner[owner_of(s)], by_group[group_of(s)])
            if best is None or rank < best[0]:
                best = (rank, s)
        if best is None:  # nobody below their share waits: the rest in order (no slot idles)
            chosen.extend(candidates[: slots - len(chosen)])
            break
        pick = best[1]
        candidates.remove(pick)
        chosen.append(pick)
        by_owner[owner_of(pick)] += 1
        by_group[group_of(pick)] += 1
    return chosen


def starved(waiting: list[Sequence], running: list[Sequence]) -> int:
    """How many waiting sequences their request's share entitles to a slot now."""
    shares = _shares(waiting, running, len(running))
    held = Counter(group_of(s) for s in running)
    want = Counter(group_of(s) for s in waiting)
    return sum(max(0, min(n, shares[g] - held[g])) for g, n in want.items())


def preemptible(
    waiting: list[Sequence], running: list[Sequence], reading: list[Sequence]
) -> int | None:
    """Index in `reading` of the prompt to set aside so that a waiting request below its
    share gets a slot, or None when no waiting request is below its share."""
    shares = _shares(waiting, running, len(running))
    held = Counter(group_of(s) for s in running)
    if all(held[group_of(s)] >= shares[group_of(s)] for s in waiting):
        return None
    excess = {g: held[g] - shares[g] for g in held}
    candidates = [i for i, s in enumerate(reading) if excess[group_of(s)] > 0]
    if not candidates:
        return None
    return max(candidates, key=lambda i: (excess[group_of(reading[i])], i))


def _shares(waiting: list[Sequence], running: list[Sequence], capacity: int) -> dict[str, int]:
    """Each request's most slots: the batch split between keys, then between a key's requests."""
    groups_of_owner: dict[str, set[str]] = {}
    for s in waiting + running:
        groups_of_owner.setdefault(owner_of(s), set()).add(group_of(s))
    per_owner = capacity / len(groups_of_owner)
    return {
        group: max(1, int(per_owner / len(groups)))
        for groups in groups_of_owner.values()
        for group in groups
    }


@dataclass
class PrefillPacer:
    prefill_share: float = 0.5
    tokens_per_second: float = 0.0  # measured prompt reading speed
    step_seconds: float = 0.0  # measured decode step time

    def budget(self, decoding: bool, ceiling: int) -> int:
        """Prompt tokens the next step may read."""
        if self.tokens_per_second <= 0:
            return min(ceiling, MIN_CHUNK * 4)  # first step: measure with a small read
        if decoding:
            share = min(self.prefill_share, 0.95)
            seconds = self.step_seconds * share / (1 - share)
        else:
            seconds = IDLE_STEP_SECONDS
        return max(MIN_CHUNK, min(ceiling, int(seconds * self.tokens_per_second)))

    def read(self, tokens: int, seconds: float) -> None:
        if tokens >= MIN_CHUNK and seconds > 0:
            self.tokens_per_second = _smooth(self.tokens_per_second, tokens / seconds)

    def decoded(self, seconds: float) -> None:
        self.step_seconds = _smooth(self.step_seconds, seconds)


def _smooth(average: float, value: float) -> float:
    return value if average <= 0 else average + SMOOTHING * (value - average)
