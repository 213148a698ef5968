"""Images in chat: a tiny random-weight LLaVA (mlx-vlm's own classes, SmolLM2's tokenizer with
<image>) served by a real uvicorn server, asked through the official openai and anthropic SDKs;
bad images answered with 400s naming the part; and, on the engine, proof the image reaches the
model (other image, other logits; same image, same logits; and the same logits as mlx-vlm's own
forward pass)."""

from __future__ import annotations

import base64
import os
import queue
from collections.abc import Iterator
from pathlib import Path

import anthropic
import httpx
import mlx.core as mx
import openai
import pytest
from asgiref.sync import async_to_sync

from inference.adapters import FamilyProfile, get_adapter
from inference.engine.kv import NATIVE
from inference.engine.types import (
    Delta,
    Done,
    ErrorKind,
    Failed,
    GenerationJob,
    ModelSpec,
    SamplingParams,
    TokenPrompt,
)
from inference.protocol.errors import APIError
from inference.serving.prompts import ChatPrompt
from tests.support.helpers import build_tiny_model, prepared_job
from tests.support.image_server import image_server
from tests.support.live_server import LiveServer, free_port, live_server
from tests.support.vision_models import (
    build_tiny_gemma3,
    build_tiny_llava,
    build_tiny_smolvlm,
    data_url,
    png_bytes,
)

# Its servers have their own databases and store nothing a request says: the PostgreSQL pass
# would only repeat it (tests/conftest.py).
pytestmark = pytest.mark.database_independent

RED, BLUE = png_bytes((255, 0, 0)), png_bytes((0, 0, 255))
BUILDERS = {"llava": build_tiny_llava, "smolvlm": build_tiny_smolvlm, "gemma3": build_tiny_gemma3}
LIMITS = {
    "IMAGE_FETCH_REMOTE": "true",
    "IMAGE_FETCH_TIMEOUT": "3",
    # The test image server is on loopback, which fetching refuses unless the operator trusts
    # it: 127.0.0.1 only, so a redirect elsewhere inside ([::1], 169.254.169.254) is refused.
    "IMAGE_FETCH_PRIVATE_NETWORKS": "127.0.0.1/32",
    "IMAGE_MAX_PIXELS": "4096",
    "IMAGE_MAX_BYTES": "20000",
    "IMAGE_MAX_PER_REQUEST": "3",
}


@pytest.fixture(scope="module")
def llava_dir(smollm_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_llava(smollm_dir, tmp_path_factory.mktemp("vision") / "llava")


@pytest.fixture(scope="module")
def server(
    llava_dir: Path, smollm_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LiveServer]:
    var = tmp_path_factory.mktemp("vision-var")
    tiny = build_tiny_model(smollm_dir, var / "tiny")
    mark = "from catalog.models import CatalogModel as C; C.objects.filter(public_id='vl')"
    setup = (
        ("add_model", "vl", "--local", str(llava_dir)),
        ("add_model", "tiny", "--local", str(tiny)),
        ("shell", "-c", f"{mark}.update(vision=True)"),
    )
    with live_server(var, *setup, **LIMITS) as server:
        yield server


@pytest.fixture(scope="module")
def client(server: LiveServer) -> openai.OpenAI:
    return server.openai()


@pytest.fixture(scope="module")
def claude(server: LiveServer) -> anthropic.Anthropic:
    return server.anthropic()


def image_part(url: str, detail: str = "auto") -> dict:
    return {"type": "image_url", "image_url": {"url": url, "detail": detail}}


def user(*parts: dict, text: str = "What is in this picture?") -> list[dict]:
    return [{"role": "user", "content": [*parts, {"type": "text", "text": text}]}]


def first_top(client: openai.OpenAI, messages: list[dict]) -> dict[str, float]:
    reply = client.chat.completions.create(
        model="vl", messages=messages, max_tokens=2, temperature=0, logprobs=True, top_logprobs=5
    )
    return {t.token: t.logprob for t in reply.choices[0].logprobs.content[0].top_logprobs}


def test_openai_sdk_reads_an_image(client: openai.OpenAI) -> None:
    text_only = client.chat.completions.create(
        model="vl", messages=user(), max_tokens=4, temperature=0
    )
    reply = client.chat.completions.create(
        model="vl", messages=user(image_part(data_url(RED))), max_tokens=4, temperature=0
    )
    assert reply.choices[0].message.content
    # 4 image tokens (28 / 14 squared) stand where the one <image> placeholder was.
    assert reply.usage.prompt_tokens == text_only.usage.prompt_tokens + 4
    assert text_only.choices[0].message.content


def test_the_image_reaches_the_model(client: openai.OpenAI) -> None:
    red = first_top(client, user(image_part(data_url(RED))))
    again = first_top(client, user(image_part(data_url(RED), "high")))
    blue = first_top(client, user(image_part(data_url(BLUE))))
    assert red == again
    assert red != blue


def test_several_images_and_streaming(client: openai.OpenAI) -> None:
    messages = user(image_part(data_url(RED)), image_part(data_url(BLUE), "low"))
    reply = client.chat.completions.create(
        model="vl", messages=messages, max_tokens=4, temperature=0
    )
    single = client.chat.completions.create(
        model="vl", messages=user(image_part(data_url(RED))), max_tokens=4, temperature=0
    )
    assert reply.usage.prompt_tokens == single.usage.prompt_tokens + 4
    chunks = list(
        client.chat.completions.create(
            model="vl", messages=messages, max_tokens=4, temperature=0, stream=True
        )
    )
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed == reply.choices[0].message.content


def test_anthropic_sdk_reads_an_image(claude: anthropic.Anthropic, client: openai.OpenAI) -> None:
    block = {
        "type": "image",
        "source": {
            "type": "base64",
            "media_type": "image/png",
            "data": base64.b64encode(RED).decode(),
        },
    }
    content = [block, {"type": "text", "text": "What is in this picture?"}]
    message = claude.messages.create(
        model="vl",
        max_tokens=4,
        messages=[{"role": "user", "content": content}],
        extra_body={"temperature": 0},
    )
    assert message.content[0].text
    openai_reply = client.chat.completions.create(
        model="vl", messages=user(image_part(data_url(RED))), max_tokens=4, temperature=0
    )
    # The same prompt in both dialects: same tokens, same greedy reply.
    assert message.usage.input_tokens == openai_reply.usage.prompt_tokens
    assert message.content[0].text == openai_reply.choices[0].message.content
    count = claude.messages.count_tokens(
        model="vl", messages=[{"role": "user", "content": content}]
    )
    assert count.input_tokens == message.usage.input_tokens


BIG = data_url(base64.b64decode(base64.b64encode(os.urandom(30000))))
NOISE = data_url(b"this is not an image at all")
TRUNCATED = data_url(png_bytes((9, 9, 9), (24, 24))[:60])
HUGE = data_url(png_bytes((1, 2, 3), (100, 100)))
GOOD = data_url(RED)
DEAD = f"http://127.0.0.1:{free_port()}/cat.png"
FOUR = user(*[image_part(GOOD)] * 4)

# (name, model, messages, param, words in the message)
OPENAI_CASES = [
    ("not base64", "vl", user(image_part("data:image/png;base64,@@@@")), "base64"),
    ("base64 of non-image bytes", "vl", user(image_part(NOISE)), "not an image"),
    ("unsupported media type", "vl", user(image_part("data:image/tiff;base64,AAAA")), "tiff"),
    ("data url without base64", "vl", user(image_part("data:image/png,xyz")), "data URL"),
    ("truncated png", "vl", user(image_part(TRUNCATED)), "image"),
    ("too many pixels", "vl", user(image_part(HUGE)), "100x100"),
    ("too many bytes", "vl", user(image_part(BIG)), "larger"),
    ("too many images", "vl", FOUR, "Too many images"),
    ("unreachable url", "vl", user(image_part(DEAD)), "could not be fetched"),
    ("file url", "vl", user(image_part("file:///etc/passwd")), "data: URL"),
    ("text-only model", "tiny", user(image_part(GOOD)), "does not read images"),
]
OPENAI_PARAMS = {"too many images": "messages.0.content.3"}
# Refused while parsing: the param names the content (pydantic's union of a string and parts
# ends the path there), the message the field.
SCHEMA_CASES = [
    ("empty url", user(image_part("")), "url"),
    ("missing image_url", user({"type": "image_url"}), "image_url"),
    ("bad detail", user(image_part(GOOD, "ultra")), "detail"),
]


@pytest.mark.parametrize(
    ("model", "messages", "words"),
    [case[1:] for case in OPENAI_CASES],
    ids=[case[0] for case in OPENAI_CASES],
)
def test_bad_images_are_400s_naming_the_part(server: LiveServer, model, messages, words) -> None:
    body = {"model": model, "messages": messages, "max_tokens": 2}
    response = httpx.post(f"{server.api}/chat/completions", json=body, timeout=60)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    name = next(case[0] for case in OPENAI_CASES if case[2] is messages)
    assert error["param"] == OPENAI_PARAMS.get(name, "messages.0.content.0")
    assert words in error["message"]


def test_a_remote_image_is_fetched_and_read(client: openai.OpenAI) -> None:
    with image_server() as served:
        remote = first_top(client, user(image_part(f"{served.url}/image")))
    assert remote == first_top(client, user(image_part(data_url(RED))))  # the same image
    assert served.paths == ["/image"]


@pytest.mark.parametrize(
    "inside", ["http://[::1]:{port}/image", "http://169.254.169.254/latest/meta-data/"]
)
def test_a_redirect_into_the_server_s_network_is_refused(server: LiveServer, inside) -> None:
    """The URL's host is trusted; where it redirects to is not: the fetch stops there, and the
    caller learns nothing of the address or what answered."""
    with image_server() as served:
        target = inside.format(port=served.url.rsplit(":", 1)[1])
        url = f"{served.url}/redirect?to={target}"
        body = {"model": "vl", "messages": user(image_part(url)), "max_tokens": 2}
        response = httpx.post(f"{server.api}/chat/completions", json=body, timeout=60)
    assert response.status_code == 400, response.text
    message = response.json()["error"]["message"]
    assert "messages.0.content.0 could not be fetched" in message
    for detail in ("::1", "169.254", "302", "meta-data"):
        assert detail not in message
    assert served.paths == [f"/redirect?to={target}"]  # the inside address was never asked
    assert "not a public address" in server.log.read_text()


@pytest.mark.parametrize(
    ("messages", "field"), [c[1:] for c in SCHEMA_CASES], ids=[c[0] for c in SCHEMA_CASES]
)
def test_malformed_image_parts_are_400s(server: LiveServer, messages, field) -> None:
    body = {"model": "vl", "messages": messages, "max_tokens": 2}
    response = httpx.post(f"{server.api}/chat/completions", json=body, timeout=60)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == "messages.0.content"
    assert field in error["message"], error


def block(source: dict) -> list[dict]:
    content = [{"type": "image", "source": source}, {"type": "text", "text": "What is it?"}]
    return [{"role": "user", "content": content}]


PNG64 = base64.b64encode(RED).decode()
ANTHROPIC_CASES = [
    (
        "wrong media type",
        "vl",
        {"type": "base64", "media_type": "image/jpeg", "data": PNG64},
        "not image/jpeg",
    ),
    (
        "unsupported media type",
        "vl",
        {"type": "base64", "media_type": "image/tiff", "data": PNG64},
        "media_type",
    ),
    ("not base64", "vl", {"type": "base64", "media_type": "image/png", "data": "@@@"}, "base64"),
    ("file url", "vl", {"type": "url", "url": "file:///etc/passwd"}, "data: URL"),
    (
        "text-only model",
        "tiny",
        {"type": "base64", "media_type": "image/png", "data": PNG64},
        "does not read images",
    ),
]


@pytest.mark.parametrize(
    ("model", "source", "words"),
    [case[1:] for case in ANTHROPIC_CASES],
    ids=[case[0] for case in ANTHROPIC_CASES],
)
def test_bad_anthropic_images_are_400s(server: LiveServer, model, source, words) -> None:
    body = {"model": model, "messages": block(source), "max_tokens": 2}
    response = httpx.post(f"{server.url}/v1/messages", json=body, timeout=60)
    assert response.status_code == 400, response.text
    payload = response.json()
    assert payload["type"] == "error"
    assert payload["error"]["type"] == "invalid_request_error"
    assert words in payload["error"]["message"]


def test_anthropic_documents_are_still_refused(server: LiveServer) -> None:
    document = {
        "type": "document",
        "source": {"type": "text", "media_type": "text/plain", "data": "x"},
    }
    body = {"model": "vl", "messages": [{"role": "user", "content": [document]}], "max_tokens": 2}
    response = httpx.post(f"{server.url}/v1/messages", json=body, timeout=60)
    assert response.status_code == 400
    assert "document blocks are not supported" in response.json()["error"]["message"]


def test_remote_images_are_refused_when_fetching_is_off(settings) -> None:
    from inference.serving.images import ImageSource, load_images

    settings.IMAGE_FETCH_REMOTE = False
    source = ImageSource("messages.2.content.1", url="https://example.com/cat.png")
    with pytest.raises(APIError) as caught:
        async_to_sync(load_images)([source], "vl", True)
    assert caught.value.param == "messages.2.content.1"
    assert "does not fetch remote images" in caught.value.message


def _first_logprobs(engine, spec: ModelSpec, images: tuple) -> mx.array:
    content = [*({"type": "image"} for _ in images), {"type": "text", "text": "What is it?"}]
    events: queue.SimpleQueue = queue.SimpleQueue()
    params = SamplingParams(temperature=0, max_tokens=1, logprobs=True, top_logprobs=5)
    prompt = ChatPrompt([{"role": "user", "content": content}], images=images)
    engine.submit(prepared_job(spec, get_adapter(FamilyProfile()), prompt, params, events.put))
    while not isinstance(event := events.get(timeout=120), Done):
        if isinstance(event, Delta) and event.logprobs:
            top = event.logprobs[0].top
    return {c.token: c.logprob for c in top}


@pytest.fixture(scope="module", params=sorted(BUILDERS))
def family_dir(
    request, llava_dir: Path, smollm_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    if request.param == "llava":
        return llava_dir
    return BUILDERS[request.param](smollm_dir, tmp_path_factory.mktemp("vision") / request.param)


def _image(data: bytes):
    import io

    from PIL import Image

    return Image.open(io.BytesIO(data)).convert("RGB")


def test_engine_reads_the_image(engine, family_dir: Path) -> None:
    """Per family: another image, other first-token logits; the same image, the same ones."""
    spec = ModelSpec(model_id=f"vl-{family_dir.name}", location=str(family_dir), vision=True)
    red = _first_logprobs(engine, spec, (_image(RED),))
    again = _first_logprobs(engine, spec, (_image(RED),))
    blue = _first_logprobs(engine, spec, (_image(BLUE),))
    assert red == again
    assert red != blue


def _reference_logprobs(location: Path, image) -> dict[str, float]:
    """mlx-vlm's own pass: its processor, get_input_embeddings, its language model's logits."""
    import numpy as np
    from mlx_vlm.utils import load

    model, processor = load(str(location))
    text = processor.tokenizer.apply_chat_template(
        [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What is it?"}]}],
        add_generation_prompt=True,
        tokenize=False,
    )
    inputs = {k: mx.array(np.asarray(v)) for k, v in processor(text=[text], images=[image]).items()}
    ids, pixels = inputs.pop("input_ids"), inputs.pop("pixel_values")
    inputs["mask"] = inputs.pop("attention_mask")
    embeds = model.get_input_embeddings(ids, pixels, **inputs).inputs_embeds
    logits = model.language_model(ids, inputs_embeds=embeds).logits[0, -1]
    logprobs = logits - mx.logsumexp(logits)
    best = mx.argsort(-logprobs)[:5].tolist()
    return {processor.tokenizer.decode([i]): logprobs[i].item() for i in best}


def test_engine_matches_mlx_vlm_forward_pass(engine, family_dir: Path) -> None:
    """Prefill from embeddings + the decode step give mlx-vlm's own logits for the prompt (for
    Gemma 3 this also shows sqrt(hidden) is applied once: its language model scales
    inputs_embeds, and get_input_embeddings pre-divides the image features). K/V kept as the
    model computes them, as mlx-vlm does: float16 K/V (the CPU's default) moves logprobs ~1e-3."""
    spec = ModelSpec(
        model_id=f"vl-{family_dir.name}-ref",
        location=str(family_dir),
        vision=True,
        kv_cache=NATIVE,
    )
    red = _image(RED)
    ours = _first_logprobs(engine, spec, (red,))
    theirs = _reference_logprobs(family_dir, red)
    assert list(ours) == list(theirs)
    assert all(abs(ours[t] - theirs[t]) < 1e-3 for t in ours)


@pytest.mark.parametrize(
    ("model_type", "family"), [("qwen2_vl", "Qwen2-VL"), ("qwen3_vl", "Qwen3-VL")]
)
def test_mrope_families_are_refused_saying_why(engine, tmp_path: Path, model_type, family) -> None:
    (tmp_path / "config.json").write_text(f'{{"model_type": "{model_type}"}}')
    spec = ModelSpec(model_id="qwen-vl", location=str(tmp_path), vision=True)
    events: queue.SimpleQueue = queue.SimpleQueue()
    params = SamplingParams(temperature=0, max_tokens=1)
    # Refused as the engine loads it (the folder has no tokenizer to prepare a prompt with).
    engine.submit(GenerationJob(spec, TokenPrompt((1,)), params, events.put))
    event = events.get(timeout=60)
    assert isinstance(event, Failed)
    assert event.error.kind is ErrorKind.MODEL_UNAVAILABLE
    expected = f"model 'qwen-vl': {family}'s 3-D (M-RoPE) image positions are not supported yet"
    assert event.error.message.startswith(expected)


def input_image(url: str, **extra) -> dict:
    return {"type": "input_image", "image_url": url, "detail": "auto", **extra}


def responses_input(*parts: dict) -> list[dict]:
    text = {"type": "input_text", "text": "What is in this picture?"}
    return [{"role": "user", "content": [*parts, text]}]


def test_responses_sdk_reads_an_image(client: openai.OpenAI) -> None:
    """input_image parts go the chat path: same tokens and greedy reply as image_url parts."""
    response = client.responses.create(
        model="vl", input=responses_input(input_image(GOOD)), max_output_tokens=4, temperature=0
    )
    chat = client.chat.completions.create(
        model="vl", messages=user(image_part(GOOD)), max_tokens=4, temperature=0
    )
    assert response.usage.input_tokens == chat.usage.prompt_tokens
    assert response.output_text == chat.choices[0].message.content
    blue = client.responses.create(
        model="vl",
        input=responses_input(input_image(data_url(BLUE))),
        max_output_tokens=4,
        temperature=0,
    )
    assert blue.usage.input_tokens == response.usage.input_tokens
    listed = client.responses.input_items.list(response.id)
    assert listed.data[0].content[0].type == "input_image"
    # A follow-up reads the earlier image again through previous_response_id.
    follow = client.responses.create(
        model="vl",
        previous_response_id=response.id,
        input="And now?",
        max_output_tokens=2,
        temperature=0,
    )
    assert follow.usage.input_tokens > response.usage.input_tokens


RESPONSES_CASES = [
    ("file_id", "vl", input_image(GOOD, file_id="file-1"), "input.0.content.0.file_id", "file"),
    ("not base64", "vl", input_image("data:image/png;base64,@@"), "input.0.content.0", "base64"),
    ("non-image bytes", "vl", input_image(NOISE), "input.0.content.0", "not an image"),
    ("text-only model", "tiny", input_image(GOOD), "input.0.content.0", "does not read images"),
]


@pytest.mark.parametrize(
    ("model", "part", "param", "words"),
    [case[1:] for case in RESPONSES_CASES],
    ids=[case[0] for case in RESPONSES_CASES],
)
def test_bad_responses_images_are_400s(server: LiveServer, model, part, param, words) -> None:
    body = {"model": model, "input": responses_input(part), "max_output_tokens": 2}
    response = httpx.post(f"{server.api}/responses", json=body, timeout=60)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == param
    assert words in error["message"]


def test_responses_image_without_url_is_a_400(server: LiveServer) -> None:
    body = {"model": "vl", "input": responses_input({"type": "input_image"})}
    response = httpx.post(f"{server.api}/responses", json=body, timeout=60)
    assert response.status_code == 400, response.text
    assert "image_url" in response.json()["error"]["message"]
