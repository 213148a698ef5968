from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol


class Tokenizer(Protocol):
    """The slice of mlx-lm's TokenizerWrapper that adapters use."""

    eos_token_ids: set[int]
    chat_template: str | None

    def apply_chat_template(self, messages: list[dict], **kwargs: Any) -> Any: ...

    def convert_tokens_to_ids(self, token: str) -> int | None: ...

    def get_vocab(self) -> dict[str, int]: ...


class ChatTemplateMissing(ValueError):
    """The model has no chat template and its family gives none."""


@dataclass(frozen=True)
class FamilyProfile:
    """What the catalog says about a family, detached from the ORM."""

    slug: str = "default"
    adapter: str = "default"
    extra_stop_tokens: tuple[str, ...] = ()
    stop_strings: tuple[str, ...] = ()
    chat_template: str = ""


@dataclass
class FamilyAdapter:
    """Default behaviour: the tokenizer's chat template, eos plus the family's stop tokens."""

    profile: FamilyProfile = field(default_factory=FamilyProfile)

    name: ClassVar[str] = "default"
    label: ClassVar[str] = "Default (tokenizer's chat template)"
    # Stop tokens the family always has, on top of what the catalog row adds.
    builtin_stop_tokens: ClassVar[tuple[str, ...]] = ()

    def stop_token_ids(self, tokenizer: Tokenizer) -> frozenset[int]:
        vocab = tokenizer.get_vocab()
        names = (*self.builtin_stop_tokens, *self.profile.extra_stop_tokens)
        # A token the vocabulary lacks cannot be generated, so it cannot need stopping on.
        extra = {vocab[name] for name in names if name in vocab}
        return frozenset(set(tokenizer.eos_token_ids) | extra)

    def stop_strings(self) -> tuple[str, ...]:
        return self.profile.stop_strings

    def prepare_messages(self, messages: list[dict]) -> list[dict]:
        return messages

    def render_prompt(self, tokenizer: Tokenizer, messages: list[dict]) -> list[int]:
        template = self.profile.chat_template or None
        if template is None and not tokenizer.chat_template:
            raise ChatTemplateMissing(
                "this model has no chat template; give its family one in the catalog"
            )
        tokens = tokenizer.apply_chat_template(
            self.prepare_messages(messages),
            chat_template=template,
            add_generation_prompt=True,
            tokenize=True,
        )
        # transformers 5 returns a BatchEncoding where 4 returned a list.
        if hasattr(tokens, "input_ids"):
            tokens = tokens.input_ids
        return list(tokens)


def fold_system_into_first_user(messages: list[dict]) -> list[dict]:
    """For templates that reject the system role: prepend it to the first user turn."""
    system = [m["content"] for m in messages if m["role"] == "system"]
    rest = [dict(m) for m in messages if m["role"] != "system"]
    if not system:
        return rest
    preamble = "\n\n".join(system)
    for message in rest:
        if message["role"] == "user":
            message["content"] = f"{preamble}\n\n{message['content']}"
            return rest
    return [{"role": "user", "content": preamble}, *rest]
