"""Image parts of a chat request turned into decoded, checked images for a vision model.

Every dialect names its images as `ImageSource`s (where the bytes are, and the param that names
the part); `load_images` refuses them for a model that does not read images, fetches remote
ones (only when IMAGE_FETCH_REMOTE is on, only from public addresses: serving/image_fetch.py),
decodes each with Pillow after checking its size against IMAGE_MAX_PIXELS (no decompression
bombs), and answers a 400 naming the part for anything wrong.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import io
import logging
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from PIL import Image

from inference.protocol.errors import APIError
from inference.serving import image_fetch

log = logging.getLogger(__name__)

MEDIA_TYPES = {"PNG": "image/png", "JPEG": "image/jpeg", "WEBP": "image/webp", "GIF": "image/gif"}


@dataclass(frozen=True)
class ImageSource:
    param: str  # the part, e.g. "messages.1.content.2"
    url: str = ""  # a data: or http(s) URL
    data: str = ""  # base64 bytes (Anthropic's base64 source)
    media_type: str = ""  # what the client says they are (Anthropic's media_type)


def template_content(parts: list[str | None]) -> list[dict]:
    """A message's content for the chat template: its text parts, and an image placeholder
    (None in `parts`) where each image goes, the form vision processors' templates expect."""
    return [{"type": "image"} if p is None else {"type": "text", "text": p} for p in parts]


def bad_image(source: ImageSource, message: str) -> APIError:
    return APIError(message, param=source.param, code="invalid_image")


async def load_images(
    sources: list[ImageSource], model_id: str, vision: bool
) -> tuple[Image.Image, ...]:
    """The decoded images, in order; a 400 naming the first part that is wrong."""
    if not sources:
        return ()
    if not vision:
        raise APIError(
            f"model '{model_id}' does not read images: image input is not supported for it; "
            "send text, or use a vision model.",
            param=sources[0].param,
            code="image_input_not_supported",
        )
    if len(sources) > settings.IMAGE_MAX_PER_REQUEST:
        raise APIError(
            f"Too many images: {len(sources)}; this server takes at most "
            f"{settings.IMAGE_MAX_PER_REQUEST} per request.",
            param=sources[settings.IMAGE_MAX_PER_REQUEST].param,
            code="too_many_images",
        )
    # Decoding a large image takes a while: off the event loop, which serves every stream.
    return tuple(
        [await asyncio.to_thread(decode, source, await image_bytes(source)) for source in sources]
    )


async def image_bytes(source: ImageSource) -> bytes:
    if source.data:
        return _base64(source, source.data)
    url = source.url.strip()
    if url.startswith("data:"):
        return _data_url(source, url)
    if url.startswith(("http://", "https://")):
        return await _fetch(source, url)
    raise bad_image(
        source, "An image URL must be a data: URL (base64) or, where enabled, an http(s) URL."
    )


def _base64(source: ImageSource, text: str) -> bytes:
    if len(text) > settings.IMAGE_MAX_BYTES * 4 // 3 + 4:
        raise _too_big(source)
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise bad_image(source, "The image data is not valid base64.") from None


def _data_url(source: ImageSource, url: str) -> bytes:
    header, comma, payload = url.partition(",")
    if not comma or not header.endswith(";base64"):
        raise bad_image(source, "A data URL image must look like data:image/png;base64,<data>.")
    media_type = header[len("data:") : -len(";base64")].lower()
    if media_type not in MEDIA_TYPES.values():
        raise bad_image(
            source,
            f"Unsupported image type {media_type!r}: send one of "
            f"{', '.join(MEDIA_TYPES.values())}.",
        )
    return _base64(source, payload)


def _too_big(source: ImageSource) -> APIError:
    return bad_image(
        source, f"The image is larger than this server's limit of {settings.IMAGE_MAX_BYTES} bytes."
    )


async def _fetch(source: ImageSource, url: str) -> bytes:
    if not settings.IMAGE_FETCH_REMOTE:
        raise bad_image(
            source,
            "This server does not fetch remote images (IMAGE_FETCH_REMOTE is off): send the "
            "image as a data: URL.",
        )
    try:
        return await image_fetch.fetch(url)
    except image_fetch.TooLarge:
        raise _too_big(source) from None
    except image_fetch.FetchRefused as exc:
        # What the inside network answered (an address, a status) stays in the log.
        log.warning("the image at %s (%s) was not fetched: %s", source.param, url, exc)
    raise bad_image(
        source,
        f"The image at {source.param} could not be fetched: this server fetches only public "
        f"http(s) URLs that answer with the image within {settings.IMAGE_FETCH_TIMEOUT:g} s.",
    )


def decode(source: ImageSource, data: bytes) -> Image.Image:
    """The image, loaded and in RGB; checked before its pixels are decoded."""
    if len(data) > settings.IMAGE_MAX_BYTES:
        raise _too_big(source)
    try:
        with Image.open(io.BytesIO(data)) as probe:
            kind, size = probe.format, probe.size
            probe.verify()
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError):
        raise bad_image(source, "The data is not an image this server can read.") from None
    if kind not in MEDIA_TYPES:
        raise bad_image(source, f"Unsupported image format {kind}: send PNG, JPEG, WebP or GIF.")
    if source.media_type and MEDIA_TYPES[kind] != source.media_type:
        raise bad_image(
            source, f"The image is {MEDIA_TYPES[kind]}, not {source.media_type} as declared."
        )
    if size[0] * size[1] > settings.IMAGE_MAX_PIXELS:
        raise bad_image(
            source,
            f"The image has {size[0]}x{size[1]} pixels, more than this server's limit of "
            f"{settings.IMAGE_MAX_PIXELS}.",
        )
    return _loaded(source, data)


def _loaded(source: ImageSource, data: bytes) -> Any:
    try:
        with Image.open(io.BytesIO(data)) as image:
            image.load()
            return image.convert("RGB")
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError):
        raise bad_image(source, "The image is truncated or corrupt.") from None
