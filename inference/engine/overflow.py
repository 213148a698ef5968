"""A chat prompt longer than the model's context, under the catalog's "truncate_middle"
policy: the oldest turns are left out until the prompt leaves room for a reply.

What is kept: every system message, the tools (they are not messages), and the latest turn. A
turn is a user message with the assistant replies and tool results after it, so a tool call
always goes with its results and what is left starts with a user message. When dropping every
older turn is not enough, the latest turn's older tool exchanges (an assistant message and the
results after it) go too, oldest first, keeping its user message and its last exchange: agents
spend most of a long session inside one turn.

Rendering is deterministic, so every rank of a distributed group drops the same messages."""

from __future__ import annotations

from collections.abc import Callable

from inference.engine.types import EngineError, ErrorKind

Render = Callable[[list[dict]], list[int]]


def context_exceeded(prompt_tokens: int, context_length: int, param: str) -> EngineError:
    """OpenAI's wording; the numbers travel too, for the other dialects' own."""
    what = "messages" if param == "messages" else "prompt"
    return EngineError(
        ErrorKind.CONTEXT_LENGTH_EXCEEDED,
        f"This model's maximum context length is {context_length} tokens. However, your {what} "
        f"resulted in {prompt_tokens} tokens. Please reduce the length of the {what}.",
        param,
        prompt_tokens=prompt_tokens,
        context_length=context_length,
    )


def too_many_prompt_tokens(total: int, limit: int) -> EngineError:
    """A request whose prompts, every copy counted, take more than the server reads for one
    request (serving checks prepared prompts; the engine, prompts with images)."""
    return EngineError(
        ErrorKind.PROMPT_TOO_LARGE,
        f"This request's prompts (every prompt x n) take {total} tokens; this server "
        f"reads at most {limit} for one request",
    )


def reply_room(context_length: int, max_tokens: int | None) -> int:
    """The tokens a truncated prompt leaves for the reply: what it asks for, at most a quarter
    of the context (a request for 32k tokens of reply would otherwise empty the history)."""
    return max(1, min(max_tokens or context_length, context_length // 4))


def truncate_middle(
    messages: list[dict], whole: list[int], render: Render, context_length: int, room: int
) -> tuple[list[int], int]:
    """(the prompt's tokens, how many messages were left out). `whole` is the prompt with
    every message; it is returned as is when it fits, or when nothing left out would make it
    fit (the caller then refuses it if it is over the context)."""
    limit = context_length - room
    units = droppable(messages)
    if len(whole) <= limit or not units:
        return whole, 0

    def without(count: int) -> list[int]:
        gone = {i for unit in units[:count] for i in unit}
        return render([m for i, m in enumerate(messages) if i not in gone])

    fewest, tokens = len(units), without(len(units))
    if len(tokens) > limit:
        return whole, 0
    low, high = 1, fewest - 1  # dropping more never makes the prompt longer: bisect
    while low <= high:
        middle = (low + high) // 2
        candidate = without(middle)
        if len(candidate) <= limit:
            fewest, tokens, high = middle, candidate, middle - 1
        else:
            low = middle + 1
    return tokens, sum(len(unit) for unit in units[:fewest])


def droppable(messages: list[dict]) -> list[list[int]]:
    """The groups of message indices that may be left out, oldest first: every turn but the
    latest, then the latest turn's exchanges but its last. System messages are in none."""
    turns = _turns([i for i, m in enumerate(messages) if m["role"] != "system"], messages)
    if not turns:
        return []
    latest = turns[-1]
    exchanges: list[list[int]] = []
    for i in latest[1:]:
        if messages[i]["role"] == "assistant" or not exchanges:
            exchanges.append([])
        exchanges[-1].append(i)
    return [*turns[:-1], *exchanges[:-1]]


def _turns(body: list[int], messages: list[dict]) -> list[list[int]]:
    """The body split before each user message that follows no unanswered tool call."""
    turns: list[list[int]] = []
    unanswered = 0
    for i in body:
        message = messages[i]
        role = message["role"]
        if role == "assistant":
            unanswered = len(message.get("tool_calls") or ())
        elif role == "tool":
            unanswered = max(0, unanswered - 1)
        if not turns or (role == "user" and unanswered == 0):
            turns.append([])
        turns[-1].append(i)
    return turns
