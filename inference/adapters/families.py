"""The concrete family adapters: stops, tool-call markers, message quirks."""

from typing import ClassVar

from inference.adapters.base import FamilyAdapter, fold_system_into_first_user


class Llama3Adapter(FamilyAdapter):
    name = "llama3"
    label = "Llama 3 (<|eot_id|> ends a turn)"
    builtin_stop_tokens: ClassVar[tuple[str, ...]] = ("<|eot_id|>", "<|eom_id|>", "<|end_of_text|>")
    # Llama 3 answers a tool call with bare JSON: a reply that opens with "{" is held back.
    default_tool_syntax = "llama3_json"


class ChatMLAdapter(FamilyAdapter):
    name = "chatml"
    label = "ChatML / Qwen (<|im_end|> ends a turn)"
    builtin_stop_tokens: ClassVar[tuple[str, ...]] = ("<|im_end|>",)


class MistralAdapter(FamilyAdapter):
    name = "mistral"
    label = "Mistral ([INST] turns)"
    default_tool_syntax = "mistral"


class GemmaAdapter(FamilyAdapter):
    name = "gemma"
    label = "Gemma (<end_of_turn>; no system role)"
    builtin_stop_tokens: ClassVar[tuple[str, ...]] = ("<end_of_turn>",)

    def prepare_messages(self, messages: list[dict]) -> list[dict]:
        # Gemma's templates raise on a system message.
        return fold_system_into_first_user(messages)
