"""Copies of one prompt in one request (`n` > 1, or a prompt listed twice): the first copy is
read, the others wait and start from its cache. A request of 8 prompts with n 8 reads 8
prompts, not 64."""

from __future__ import annotations

from inference.engine.sequence import Sequence

Key = tuple[str, tuple[int, ...]]


def key_of(sequence: Sequence) -> Key | None:
    group = sequence.job.group
    return (group, tuple(sequence.prompt)) if group else None


class Copies:
    def __init__(self) -> None:
        self._leaders: dict[Key, Sequence] = {}
        self._followers: dict[int, list[Sequence]] = {}  # id(leader) -> its copies

    def follow(self, sequence: Sequence) -> bool:
        """True if `sequence` waits for a copy of its prompt already queued or being read;
        otherwise it becomes the one others with its prompt will wait for."""
        key = key_of(sequence)
        if key is None:
            return False
        leader = self._leaders.get(key)
        if leader is None:
            self._leaders[key] = sequence
            return False
        self._followers.setdefault(id(leader), []).append(sequence)
        return True

    def release(self, leader: Sequence) -> list[Sequence]:
        """The copies waiting for `leader`, which stops leading (its prompt is read, or it is
        gone)."""
        key = key_of(leader)
        if key is not None and self._leaders.get(key) is leader:
            del self._leaders[key]
        return self._followers.pop(id(leader), [])

    def forget(self, gone: set[int]) -> int:
        """Drops waiting copies whose ids are in `gone`; returns how many."""
        dropped = 0
        for leader_id, followers in list(self._followers.items()):
            kept = [s for s in followers if id(s) not in gone]
            dropped += len(followers) - len(kept)
            self._followers[leader_id] = kept
        return dropped

    @property
    def waiting(self) -> list[Sequence]:
        return [s for followers in self._followers.values() for s in followers]
