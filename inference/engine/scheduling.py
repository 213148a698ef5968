"""Who runs next, and how much prompt reading one step may do.

Fair shares: slots are weighted by context (weight: a long prompt takes several). A key, and
a request within its key, may hold at most its share of the batch's slots while others want
them (max_batch / keys with work, split again between that key's
requests), and free slots go to whoever holds fewest (no slot idles: with nobody below their
share waiting, the rest go in order). A request that took the whole batch while alone gives
way to a newcomer below its share at once where it can: a prompt it is still reading is set
aside, its cache so far kept (preemptible); decoding sequences are never interrupted, so their
slots come back as they end.

Prefill budget: prompt reading is paced by time, not tokens, so it adapts to the machine. While
streams decode, a step reads about as many prompt tokens as fit in `prefill_share` of the step
(running streams keep their cadence: with the default 0.5 a step at most doubles); with
nothing decoding it reads for up to IDLE_STEP_SECONDS (cancellations land between steps),
but at least IDLE_MIN_CHUNK tokens.

Priorities (types.PRIORITIES): batch-priority work (the Batch API's lines) runs in what
interactive work leaves. Admission serves interactive sequences first, by the fair shares
above among themselves; batch sequences get free slots only when no interactive sequence
waits, by fair shares among batch work, and within a cap (BatchLimits): `alone`, a share of
the batch while no interactive work is in the runner (the rest stays free, so an interactive
request starts at once; regained step by step once interactive work has gone), and `beside`,
a few slots while interactive work runs or waits. A decode step's time grows with its rows:
4 closed-loop streams of SmolLM2-135M on 2 quiet cores (bench/batch_priority.py) kept x0.93
of their tokens/s beside a batch with no slot beside them (the batch ran in the lulls), x0.71
with one; hence 0 by default (ENGINE_BATCH_SLOTS). Decoding rows are never
interrupted, so batch rows over the cap leave as they end. While an interactive sequence
waits or its prompt is being read, every batch prompt being read is set aside (its cache
kept) and none is admitted: interactive prompts get the reading. Beside interactive streams,
batch prompts read only BATCH_PREFILL_SHARE of a step; an interactive prompt beside batch rows
alone reads at the idle pace (batch rows' cadence is not kept).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from inference.engine.sequence import Sequence
from inference.engine.types import BATCH

IDLE_STEP_SECONDS = 0.5
SMOOTHING = 0.3  # weight of the newest measurement in the running averages
MIN_CHUNK = 16  # tokens: below this a forward pass is mostly fixed cost
# An idle step's fewest tokens. Each step pays per product costs that its rows share (the
# weights dequantized or unpacked once, the graph built): paced by time alone, a 1-2B model
# reading 30-60 tokens a second took 16-30 tokens a step, measured its own speed at that size
# and stayed there, at half the speed of one pass over the prompt (bench/real_width_peers.py).
# A cancellation then waits up to this many tokens' reading.
IDLE_MIN_CHUNK = 256
UNIT = 512  # prompt tokens per batch slot (see weight)
# The share of a step batch prompts may read beside interactive streams (prefill_share is
# theirs among themselves): 0.1 makes such a step at most ~11% longer, MIN_CHUNK tokens aside.
BATCH_PREFILL_SHARE = 0.1
RAMP_STEPS = 4  # steps without interactive work per slot more for batch work (BatchLimits)


def owner_of(sequence: Sequence) -> str:
    return sequence.job.owner


def group_of(sequence: Sequence) -> str:
    return sequence.job.group or str(id(sequence.job))


def is_batch(sequence: Sequence) -> bool:
    return sequence.job.priority == BATCH


def weight(sequence: Sequence) -> int:
    """Slots a sequence takes: one per UNIT tokens of prompt. A decode step's cost grows with
    its rows' context (every row attends over the longest), so a 2,000-token prompt counts as
    four one-line chats."""
    return 1 + len(sequence.prompt) // UNIT


def held(sequences: list[Sequence], by=group_of) -> Counter:
    """Slots held, per request (or per key, with by=owner_of)."""
    out: Counter = Counter()
    for s in sequences:
        out[by(s)] += weight(s)
    return out


@dataclass
class BatchLimits:
    """Slots batch-priority work may hold in a runner (reading or decoding): `beside` while an
    interactive sequence runs or waits; once none has for a while, one more slot every
    RAMP_STEPS steps up to `alone`. Decoding rows are never interrupted, so a batch that
    filled its share in a moment's gap between interactive requests (a client's next turn,
    a closed loop's streams ending together) would slow the next ones for as long as its rows
    last; counted in steps, not seconds, so every rank of a group decides alike."""

    alone: int
    beside: int
    quiet: int | None = None  # steps since interactive work was last here (None: never)

    @classmethod
    def of(cls, max_batch: int, share: float, beside: int) -> BatchLimits:
        alone = max(1, int(max_batch * share))
        return cls(alone, min(beside, alone))

    def cap(self, interactive: bool) -> int:
        if interactive:
            return self.beside
        if self.quiet is None:
            return self.alone
        return min(self.alone, self.beside + self.quiet // RAMP_STEPS)

    def tick(self, sequences: list[Sequence]) -> None:
        """Once a step, with the runner's sequences (waiting, reading, decoding)."""
        if any(not is_batch(s) for s in sequences):
            self.quiet = 0
        elif self.quiet is not None:
            self.quiet += 1


def used(running: list[Sequence], limits: BatchLimits | None = None) -> int:
    """Slots `running` holds, its batch work counted at most `limits.alone`: a batch sequence
    larger than its share takes all of that share (as one larger than the batch takes the
    batch), never the slots kept for interactive work."""
    interactive, batch = split(running)
    held_b = sum(weight(s) for s in batch)
    if limits is not None:
        held_b = min(held_b, limits.alone)
    return sum(weight(s) for s in interactive) + held_b


def split(sequences: list[Sequence]) -> tuple[list[Sequence], list[Sequence]]:
    """(interactive, batch), each in its order."""
    return [s for s in sequences if not is_batch(s)], [s for s in sequences if is_batch(s)]


def admit(
    waiting: list[Sequence],
    running: list[Sequence],
    free: int,
    limits: BatchLimits | None = None,
    reading: list[Sequence] | None = None,
) -> list[Sequence]:
    """Picks from `waiting` (oldest first) the sequences to start now, within `free` slots:
    interactive ones first; batch ones only while no interactive one waits or is being read
    (`reading`: the prompts being read, part of `running`), within `limits` (None: no cap)."""
    waiting_i, waiting_b = split(waiting)
    running_i, running_b = split(running)
    if waiting_i or not waiting_b or any(not is_batch(s) for s in reading or []):
        return _admit(waiting_i, running_i, free)
    if limits is not None:
        free = min(free, limits.cap(bool(running_i)) - sum(weight(s) for s in running_b))
    return _admit(waiting_b, running_b, free)


def _admit(waiting: list[Sequence], running: list[Sequence], free: int) -> list[Sequence]:
    """Fair shares within one priority: `running` are its sequences in the batch."""
    chosen: list[Sequence] = []
    capacity = sum(weight(s) for s in running) + free

    def cost(s: Sequence) -> int:  # a sequence larger than the batch takes all of it
        return min(weight(s), capacity)

    by_owner, by_group = held(running, owner_of), held(running)
    candidates = list(waiting)
    while candidates and free > 0:
        shares = _shares(candidates, running + chosen, capacity)
        fitting = [s for s in candidates if cost(s) <= free]
        below = [s for s in fitting if by_group[group_of(s)] < shares[group_of(s)]]
        if not below:  # nobody below their share waits: the rest in order (no slot idles)
            for s in fitting:
                if cost(s) <= free:
                    chosen.append(s)
                    free -= cost(s)
            break
        # Fewest slots held first (keys, then requests), then the cheapest: a prompt set
        # aside for a newcomer must not win its slot back from it.
        pick = min(below, key=lambda s: (by_owner[owner_of(s)], by_group[group_of(s)], weight(s)))
        candidates.remove(pick)
        chosen.append(pick)
        free -= cost(pick)
        by_owner[owner_of(pick)] += weight(pick)
        by_group[group_of(pick)] += weight(pick)
    return chosen


def starved(waiting: list[Sequence], running: list[Sequence], capacity: int) -> int:
    """Slots the neediest waiting sequence below its request's share lacks (0: none such)."""
    shares = _shares(waiting, running, capacity)
    holding = held(running)
    below = [s for s in waiting if holding[group_of(s)] < shares[group_of(s)]]
    if not below:
        return 0
    free = capacity - sum(holding.values())
    return max(0, min(weight(below[0]), capacity) - free)


def preemptible(
    waiting: list[Sequence], running: list[Sequence], reading: list[Sequence], capacity: int
) -> int | None:
    """Index in `reading` of the prompt to set aside so that a waiting request below its
    share gets a slot: the newest of the request furthest above its share; None if none."""
    shares = _shares(waiting, running, capacity)
    holding = held(running)
    excess = {g: holding[g] - shares[g] for g in holding}
    candidates = [i for i, s in enumerate(reading) if excess[group_of(s)] > 0]
    if not candidates:
        return None
    return max(candidates, key=lambda i: (excess[group_of(reading[i])], i))


def to_set_aside(
    waiting: list[Sequence],
    running: list[Sequence],
    reading: list[Sequence],
    capacity: int,
    limits: BatchLimits | None = None,
) -> int | None:
    """Index in `reading` (prompts being read, part of `running`) of the next prompt to set
    aside; None if none should be. Every batch prompt (the newest first) while an interactive
    sequence waits or is being read; then, within each priority, one of a request above its
    share while one below it waits without room (preemptible)."""
    waiting_i, waiting_b = split(waiting)
    if waiting_i or any(not is_batch(s) for s in reading):
        batch = [i for i, s in enumerate(reading) if is_batch(s)]
        if batch:
            return batch[-1]
    running_i, running_b = split(running)
    classes = [(waiting_i, running_i, capacity - used(running_b, limits), False)]
    if not waiting_i:
        cap = capacity if limits is None else limits.cap(bool(running_i))
        classes.append((waiting_b, running_b, cap, True))
    for waiting_c, running_c, capacity_c, batch_class in classes:
        if not waiting_c or starved(waiting_c, running_c, capacity_c) <= 0:
            continue
        indices = [i for i, s in enumerate(reading) if is_batch(s) == batch_class]
        victim = preemptible(waiting_c, running_c, [reading[i] for i in indices], capacity_c)
        if victim is not None:
            return indices[victim]
    return None


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

    def budget(self, decoding: bool, ceiling: int, share: float | None = None) -> int:
        """Prompt tokens the next step may read (`share`: of a decoding step, if not
        prefill_share)."""
        if self.tokens_per_second <= 0:
            return min(ceiling, MIN_CHUNK * 4)  # first step: measure with a small read
        if decoding:
            share = min(self.prefill_share if share is None else share, 0.95)
            seconds = self.step_seconds * share / (1 - share)
            return max(MIN_CHUNK, min(ceiling, int(seconds * self.tokens_per_second)))
        return min(ceiling, max(IDLE_MIN_CHUNK, int(IDLE_STEP_SECONDS * self.tokens_per_second)))

    def budget_for(self, reading: list[Sequence], decoding: list[Sequence], ceiling: int) -> int:
        """The next step's budget by priority: interactive prompts (batch prompts were set
        aside for them) weigh only against interactive streams; batch prompts beside
        interactive streams get BATCH_PREFILL_SHARE; otherwise as budget."""
        streams = any(not is_batch(s) for s in decoding)
        if any(not is_batch(s) for s in reading):
            return self.budget(streams, ceiling)
        if streams:
            return self.budget(True, ceiling, BATCH_PREFILL_SHARE)
        return self.budget(bool(decoding), ceiling)

    def read(self, tokens: int, seconds: float) -> None:
        if tokens >= MIN_CHUNK and seconds > 0:
            self.tokens_per_second = _smooth(self.tokens_per_second, tokens / seconds)

    def decoded(self, seconds: float) -> None:
        self.step_seconds = _smooth(self.step_seconds, seconds)


def _smooth(average: float, value: float) -> float:
    return value if average <= 0 else average + SMOOTHING * (value - average)
