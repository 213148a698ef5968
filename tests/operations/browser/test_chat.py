"""The chat page as a staff member uses it: a conversation of three turns sent with Enter, each
with the whole history (its prompt grows), kept in the database and opened again after a
reload; renamed in place and deleted with a second click; stopped and regenerated; a long
prompt streamed through keep-alive comments; the scripted reasoning model's thinking folded
and its tool call shown; markdown rendered without letting the answer write HTML."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from playwright.sync_api import Locator, Page, expect

from tests.operations.browser.support import USERNAME, WAIT_MS, screenshot
from tests.support.scripted import REASONING, WEATHER_TOOL
from tests.support.vision_models import build_tiny_llava, png_bytes

TOKENS = re.compile(r"(\d+) prompt \+ (\d+) generated tokens")
THINKER = "qwen3-thinker"  # the name puts it in the seeded Qwen3 family: <think>, Hermes calls


def answers(page: Page) -> Locator:
    return page.locator("#messages li.turn.assistant")


def ask(page: Page, text: str) -> Locator:
    """Types `text`, sends it with Enter, and waits for the answer's footer."""
    before = answers(page).count()
    page.fill("#prompt", text)
    page.press("#prompt", "Enter")
    answer = answers(page).nth(before)
    expect(answer.locator(".meta .tokens")).to_be_visible(timeout=WAIT_MS)
    return answer


def tokens(answer: Locator) -> tuple[int, int]:
    match = TOKENS.fullmatch(answer.locator(".meta .tokens").inner_text())
    assert match, answer.locator(".meta").inner_text()
    return int(match[1]), int(match[2])


def open_chat(page: Page, model: str) -> None:
    page.goto("/playground")
    page.select_option("#model", model)
    page.click("#settings summary")


def test_a_three_turn_conversation_is_kept_and_reopened(page, tiny_model, shots):
    open_chat(page, tiny_model)
    expect(page.locator("#model-defaults")).to_contain_text(f"catalog's defaults for {tiny_model}")
    page.fill("#max-tokens", "6")
    page.fill("#system-prompt", "You answer in one short line.")
    prompts = []
    for question in ("Say hello.", "And again, please.", "Once more."):
        answer = ask(page, question)
        prompt, generated = tokens(answer)
        assert 0 < generated <= 6
        prompts.append(prompt)
    # Each turn is sent with the whole conversation before it.
    assert prompts[0] < prompts[1] < prompts[2], prompts
    expect(page.locator("#prompt")).to_have_value("")
    expect(page.locator("#conversation-title")).to_have_text("Say hello.")
    expect(page).to_have_url(re.compile(r"\?conversation=\d+$"))
    screenshot(page, shots, "20-chat-three-turns")

    page.reload()
    expect(page.locator("#messages li.turn")).to_have_count(6)
    expect(page.locator("#system-prompt")).to_have_value("You answer in one short line.")
    expect(page.locator("#max-tokens")).to_have_value("6")
    assert [tokens(answers(page).nth(n))[0] for n in range(3)] == prompts

    page.goto("/playground")
    expect(page.locator("#messages li.turn")).to_have_count(0)
    page.locator("#conversation-list button.open", has_text="Say hello.").first.click()
    expect(page.locator("#messages li.turn")).to_have_count(6)
    # The fourth turn goes on from the kept history.
    assert tokens(ask(page, "Last one."))[0] > prompts[2]
    screenshot(page, shots, "21-chat-reopened")


def test_rename_in_place_and_delete_with_a_second_click(page, tiny_model, shots):
    open_chat(page, tiny_model)
    page.fill("#max-tokens", "3")
    ask(page, "A conversation to rename.")
    page.click("#rename")
    page.fill("#title-input", "Renamed in place")
    page.press("#title-input", "Enter")
    expect(page.locator("#conversation-title")).to_have_text("Renamed in place")
    listed = page.locator("#conversation-list button.open", has_text="Renamed in place")
    expect(listed).to_have_count(1)
    screenshot(page, shots, "22-chat-renamed")

    page.click("#delete")
    expect(page.locator("#delete")).to_have_text("Click again to delete")
    expect(listed).to_have_count(1)  # one click only arms it
    page.click("#delete")
    expect(listed).to_have_count(0)
    expect(page.locator("#conversation-title")).to_have_text("New conversation")
    expect(page.locator("#messages li.turn")).to_have_count(0)


def test_stop_and_regenerate(page, tiny_model, shots):
    open_chat(page, tiny_model)
    page.fill("#max-tokens", "400")
    page.fill("#prompt", "Tell a long story.")
    page.press("#prompt", "Enter")
    answer = answers(page).first
    expect(answer.locator(".content")).not_to_be_empty(timeout=WAIT_MS)
    page.click("#stop")
    expect(answer.locator(".meta .finish")).to_have_text("stopped by you", timeout=WAIT_MS)
    expect(page.locator("#send")).to_be_enabled()

    page.fill("#max-tokens", "40")
    page.click("#regenerate")
    expect(answers(page)).to_have_count(1)
    expect(answers(page).first.locator(".meta .tokens")).to_be_visible(timeout=WAIT_MS)
    assert tokens(answers(page).first)[1] <= 40
    speed = answers(page).first.locator(".meta .speed")
    # Over the answer's tokens, or over the whole request when they came in one burst.
    expect(speed).to_have_text(re.compile(r"^\d+\.\d tok/s( overall)?$"))
    finish = answers(page).first.locator(".meta .finish")
    expect(finish).to_have_text(re.compile(r"^(finished|cut off: max tokens reached)$"))
    screenshot(page, shots, "23-chat-regenerated")


def test_a_long_prompt_streams_through_keep_alive_comments(page, tiny_model, shots):
    """The server here sends a keep-alive comment after 1 ms of quiet; before, the page read
    them as JSON and the answer ended with a parse error."""
    open_chat(page, tiny_model)
    page.fill("#max-tokens", "4")
    answer = ask(page, "Say hello. " * 120)
    assert tokens(answer)[0] > 240
    expect(page.locator("#status")).not_to_have_class("error")
    assert ": keep-alive" in raw_stream(page, tiny_model, "Say hello. " * 120)

    page.goto("/")
    request = page.locator("#recent-requests tbody tr", has_text="/dashboard/chat")
    expect(request.first).to_contain_text(tiny_model, timeout=WAIT_MS)
    expect(request.first).to_contain_text(f"staff:{USERNAME}")
    screenshot(page, shots, "24-dashboard-recent-chat")


def raw_stream(page: Page, model: str, prompt: str) -> str:
    """The chat page's stream for `prompt` as the page receives it, unparsed."""
    script = """async ([model, prompt]) => {
      const csrf = (document.cookie.match(/(?:^|; )csrftoken=([^;]+)/) || [])[1] || "";
      const response = await fetch("/dashboard/chat", {method: "POST", credentials: "same-origin",
        headers: {"Content-Type": "application/json", "X-CSRFToken": csrf},
        body: JSON.stringify({model, max_tokens: 8, stream: true,
                              messages: [{role: "user", content: prompt}]})});
      return await response.text();
    }"""
    return page.evaluate(script, [model, prompt])


@pytest.fixture(scope="module")
def thinker(page: Page, scripted_dir: Path) -> str:
    """The scripted reasoning model (tests/support/scripted.py), added through the admin form."""
    page.goto("/admin/catalog/catalogmodel/add/")
    page.fill("#id_public_id", THINKER)
    page.select_option("#id_source", "local")
    page.fill("#id_location", str(scripted_dir))
    page.click("input[name=_save]")
    expect(page).to_have_url(re.compile(r"/admin/catalog/catalogmodel/$"))
    return THINKER


def test_reasoning_is_folded_and_tool_calls_are_shown(page, thinker, shots):
    open_chat(page, thinker)
    page.fill("#tools", json.dumps([WEATHER_TOOL]))
    answer = ask(page, "What is the weather in Paris?")
    reasoning = answer.locator("details.reasoning")
    expect(reasoning).to_be_visible()
    expect(reasoning).not_to_have_attribute("open", "")
    expect(reasoning.locator(".reasoning-text")).to_be_hidden()  # folded until clicked
    reasoning.locator("summary").click()
    expect(reasoning.locator(".reasoning-text")).to_have_text(REASONING)
    call = answer.locator(".tool-call")
    expect(call.locator(".tool-name")).to_have_text("get_weather")
    assert json.loads(call.locator(".tool-arguments").inner_text()) == {"city": "Paris", "days": 3}
    expect(answer.locator(".meta .finish")).to_have_text("tool calls")
    screenshot(page, shots, "25-chat-reasoning-and-tool-call")


MARKDOWN = """# Title

Some **bold**, *italic* and `code <b>`.

```python
if x < 1:
    print("<script>")
```

- one
- [a link](https://example.com/a?b=1)
- [not a link](javascript:alert(1))

<img src=x onerror="window.injected = true">
"""


def test_markdown_is_rendered_as_nodes_never_as_html(page, tiny_model):
    page.goto("/playground")
    script = """source => {
      const box = document.createElement("div");
      box.append(window.markdown.render(source));
      document.body.append(box);
      return {
        html: box.innerHTML,
        h1: box.querySelector("h1").textContent,
        code: box.querySelector("pre code.language-python").textContent,
        links: [...box.querySelectorAll("a")].map(a => a.href),
        bold: box.querySelector("strong").textContent,
        images: box.querySelectorAll("img, script").length,
        injected: window.injected === true,
      };
    }"""
    shown = page.evaluate(script, MARKDOWN)
    assert shown["h1"] == "Title"
    assert shown["code"] == 'if x < 1:\n    print("<script>")'
    assert shown["links"] == ["https://example.com/a?b=1"]
    assert shown["bold"] == "bold"
    assert shown["images"] == 0 and not shown["injected"]
    assert "&lt;img src=x" in shown["html"]


@pytest.fixture(scope="module")
def vision_model(page: Page, smollm_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A tiny random LLaVA (tests/support/vision_models.py), added through the admin as reading
    images."""
    location = build_tiny_llava(smollm_dir, tmp_path_factory.mktemp("chat-vision") / "llava")
    page.goto("/admin/catalog/catalogmodel/add/")
    page.fill("#id_public_id", "eyes")
    page.select_option("#id_source", "local")
    page.fill("#id_location", str(location))
    page.check("#id_vision")
    page.click("input[name=_save]")
    expect(page).to_have_url(re.compile(r"/admin/catalog/catalogmodel/$"))
    return "eyes"


def test_images_are_attached_for_a_vision_model(page, tiny_model, vision_model, tmp_path, shots):
    open_chat(page, tiny_model)
    expect(page.locator("#attach-label")).to_be_hidden()  # a text model takes no images
    page.select_option("#model", vision_model)
    expect(page.locator("#attach-label")).to_be_visible()
    picture = tmp_path / "red.png"
    picture.write_bytes(png_bytes((200, 30, 30)))
    page.set_input_files("#attach", str(picture))
    expect(page.locator("#attached")).to_have_text("1 image(s) attached")
    page.fill("#max-tokens", "3")
    with_image = tokens(ask(page, "What is in this picture?"))[0]
    expect(page.locator("#attached")).to_have_text("")
    shown = page.locator("#messages li.turn.user img.attached-image")
    expect(shown).to_have_count(1)
    assert shown.get_attribute("src").startswith("data:image/png;base64,")
    screenshot(page, shots, "26-chat-image")
    page.reload()
    expect(page.locator("#messages li.turn.user img.attached-image")).to_have_count(1)
    # The image reached the model as image tokens: the same words alone make a shorter prompt.
    page.click("#new-conversation")
    page.select_option("#model", vision_model)
    page.click("#settings summary")  # folded again by the reload
    page.fill("#max-tokens", "3")
    assert tokens(ask(page, "What is in this picture?"))[0] < with_image
