"""The text and raw bytes of single tokens, for logprobs."""

from __future__ import annotations

from functools import cache


@cache
def _byte_decoder() -> dict[str, int]:
    """GPT-2's byte-level alphabet, reversed: printable stand-in character -> byte."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1)]
    printable += range(ord("®"), ord("ÿ") + 1)
    codes = list(printable)
    extra = 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            codes.append(256 + extra)
            extra += 1
    return {chr(code): byte for byte, code in zip(printable, codes, strict=True)}


class TokenText:
    """Maps token ids to (text, bytes) as OpenAI's logprobs report them."""

    def __init__(self, tokenizer) -> None:
        self._tokenizer = tokenizer
        self._special = set(getattr(tokenizer, "all_special_ids", []) or [])
        self._cache: dict[int, tuple[str, bytes]] = {}

    def __call__(self, token_id: int) -> tuple[str, bytes]:
        found = self._cache.get(token_id)
        if found is None:
            raw = self._bytes(token_id)
            found = self._cache[token_id] = (raw.decode("utf-8", errors="replace"), raw)
        return found

    def _bytes(self, token_id: int) -> bytes:
        piece = self._tokenizer.convert_ids_to_tokens(token_id)
        if piece is None:
            return b""
        if token_id in self._special:
            return piece.encode()
        decoder = _byte_decoder()
        if all(ch in decoder for ch in piece):  # byte-level BPE
            return bytes(decoder[ch] for ch in piece)
        if piece.startswith("<0x") and piece.endswith(">") and len(piece) == 6:  # SentencePiece
            return bytes([int(piece[3:5], 16)])
        return piece.replace("▁", " ").encode()
