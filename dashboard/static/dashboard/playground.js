// Streams an answer from /dashboard/chat (the chat API, as the logged-in staff member).
"use strict";

const csrf = () => (document.cookie.match(/(?:^|; )csrftoken=([^;]+)/) || [])[1] || "";
const $ = (id) => document.getElementById(id);
let controller = null;

async function send(event) {
  event.preventDefault();
  const answer = $("answer");
  answer.textContent = "";
  $("status").textContent = "generating…";
  $("send").disabled = true;
  $("stop").disabled = false;
  controller = new AbortController();
  const body = {
    model: $("model").value,
    messages: [{ role: "user", content: $("prompt").value }],
    temperature: Number($("temperature").value),
    max_tokens: Number($("max-tokens").value),
    stream: true,
    stream_options: { include_usage: true },
  };
  try {
    const response = await fetch("/dashboard/chat", {
      method: "POST",
      headers: { "Content-Type": "application/json", "X-CSRFToken": csrf() },
      credentials: "same-origin",
      body: JSON.stringify(body),
      signal: controller.signal,
    });
    if (!response.ok) {
      const error = await response.json().catch(() => ({}));
      throw new Error((error.error && error.error.message) || `HTTP ${response.status}`);
    }
    await readEvents(response.body.getReader(), answer);
  } catch (error) {
    $("status").textContent = error.name === "AbortError" ? "stopped" : `error: ${error.message}`;
  } finally {
    $("send").disabled = false;
    $("stop").disabled = true;
  }
}

// Parsed as SSE (sse.js): the server's keep-alive comments while a long prompt is read, or a
// request waits, are skipped instead of read as JSON.
async function readEvents(reader, answer) {
  for await (const { data } of sseEvents(reader)) {
    if (data === "[DONE]") return;
    const chunk = JSON.parse(data);
    if (chunk.error) throw new Error(chunk.error.message);
    for (const choice of chunk.choices) answer.textContent += choice.delta.content || "";
    if (chunk.usage) {
      $("status").textContent = `done · ${chunk.usage.prompt_tokens} prompt + ${chunk.usage.completion_tokens} generated tokens`;
    }
  }
}

$("playground").addEventListener("submit", send);
$("stop").addEventListener("click", () => controller && controller.abort());
