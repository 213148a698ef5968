// The chat page: conversations kept per staff member (/dashboard/conversations), each turn
// streamed from /dashboard/chat (the chat API as the logged-in member) with the whole history,
// the system prompt and only the sampling the member changed (the rest is the catalog's).
"use strict";

const $ = (id) => document.getElementById(id);
const csrf = () => (document.cookie.match(/(?:^|; )csrftoken=([^;]+)/) || [])[1] || "";
const DEFAULTS = JSON.parse($("model-defaults-data").textContent);
const SAMPLING = { temperature: "temperature", top_p: "top-p", max_tokens: "max-tokens" };

let current = blank();
let controller = null;
let attached = [];  // data: URLs of the images for the next message

function blank() {
  return { id: null, title: "", model: $("model").value, system_prompt: "", sampling: {}, turns: [] };
}

async function api(path, method = "GET", body = undefined) {
  const response = await fetch(path, {
    method,
    credentials: "same-origin",
    headers: { "Content-Type": "application/json", "X-CSRFToken": csrf() },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const document_ = await response.json().catch(() => ({}));
  if (!response.ok) throw new Error((document_.error && document_.error.message) || `HTTP ${response.status}`);
  return document_;
}

function node(tag, className = "", textContent = "") {
  const element = document.createElement(tag);
  if (className) element.className = className;
  if (textContent) element.textContent = textContent;
  return element;
}

// --- the conversation list -------------------------------------------------------------

async function refreshList() {
  const { data } = await api("/dashboard/conversations");
  const list = $("conversation-list");
  list.replaceChildren(...data.map((row) => {
    const item = node("li", row.id === current.id ? "current" : "");
    const open = node("button", "open", row.title);
    open.type = "button";
    open.dataset.id = row.id;
    open.title = `${row.model} · ${row.turn_count} turns`;
    open.addEventListener("click", () => openConversation(row.id).catch(showError));
    item.append(open);
    return item;
  }));
}

async function openConversation(id) {
  if (controller) return;  // an answer is streaming into the current one
  current = await api(`/dashboard/conversations/${id}`);
  if (!(current.model in DEFAULTS)) setStatus(`${current.model} is no longer enabled; pick another model.`);
  else $("model").value = current.model;
  $("system-prompt").value = current.system_prompt;
  for (const [name, id_] of Object.entries(SAMPLING)) $(id_).value = current.sampling[name] ?? "";
  $("tools").value = current.sampling.tools ? JSON.stringify(current.sampling.tools, null, 2) : "";
  showDefaults();
  showThread();
  remember(current.id);
  await refreshList();
}

// The open conversation is in the address, so a reload (or a bookmark) reopens it.
function remember(id) {
  history.replaceState(null, "", id ? `?conversation=${id}` : location.pathname);
}

function newConversation() {
  if (controller) return;
  current = blank();
  $("system-prompt").value = "";
  for (const id of Object.values(SAMPLING)) $(id).value = "";
  $("tools").value = "";
  showDefaults();
  showThread();
  remember(null);
  refreshList().catch(showError);
  $("prompt").focus();
}

function showThread() {
  $("conversation-title").textContent = current.id ? current.title : "New conversation";
  $("rename").disabled = $("delete").disabled = !current.id;
  $("messages").replaceChildren(...current.turns.map(turnElement));
  $("regenerate").disabled = !current.turns.length;
  setStatus("");
}

// --- rename in place, delete on a second click (no dialogs) ----------------------------

function startRename() {
  const input = $("title-input");
  input.value = current.title;
  input.hidden = false;
  $("conversation-title").hidden = true;
  input.focus();
  input.select();
}

async function finishRename(keep) {
  const input = $("title-input");
  if (input.hidden) return;
  input.hidden = true;
  $("conversation-title").hidden = false;
  const title = input.value.trim();
  if (!keep || !title || title === current.title) return;
  current.title = (await api(`/dashboard/conversations/${current.id}`, "PATCH", { title })).title;
  $("conversation-title").textContent = current.title;
  await refreshList();
}

let deleteArmed = null;

async function deleteConversation() {
  const button = $("delete");
  if (!deleteArmed) {
    button.textContent = "Click again to delete";
    button.classList.add("armed");
    deleteArmed = setTimeout(disarmDelete, 4000);
    return;
  }
  disarmDelete();
  await api(`/dashboard/conversations/${current.id}`, "DELETE");
  newConversation();
}

function disarmDelete() {
  clearTimeout(deleteArmed);
  deleteArmed = null;
  $("delete").textContent = "Delete";
  $("delete").classList.remove("armed");
}

// --- settings: the catalog's defaults beside the controls -------------------------------

function showDefaults() {
  const defaults = DEFAULTS[$("model").value] || {};
  const shown = (value) => (value === null || value === undefined ? "the model's" : String(value));
  $("temperature").placeholder = shown(defaults.temperature);
  $("top-p").placeholder = shown(defaults.top_p);
  $("max-tokens").placeholder = shown(defaults.max_tokens);
  if (defaults.max_output_tokens) $("max-tokens").max = defaults.max_output_tokens;
  else $("max-tokens").removeAttribute("max");
  $("system-prompt").placeholder = defaults.system_prompt
    ? `Catalog default: ${defaults.system_prompt}` : "None (the chat template's own, if any)";
  const limit = defaults.max_output_tokens ? ` · at most ${defaults.max_output_tokens} tokens an answer` : "";
  $("model-defaults").textContent = `Empty fields use the catalog's defaults for ${$("model").value}: `
    + `temperature ${shown(defaults.temperature)}, top p ${shown(defaults.top_p)}, `
    + `max tokens ${shown(defaults.max_tokens)}${limit}.`;
  $("attach-label").hidden = !defaults.vision;
  if (!defaults.vision) clearAttached();
}

function readSettings() {
  const sampling = {};
  for (const [name, id] of Object.entries(SAMPLING)) {
    if ($(id).value !== "") sampling[name] = Number($(id).value);
  }
  const tools = $("tools").value.trim();
  if (tools) {
    const parsed = JSON.parse(tools);  // a SyntaxError is shown as the status
    if (!Array.isArray(parsed)) throw new Error("Tools must be a JSON array of tool definitions.");
    sampling.tools = parsed;
  }
  current.model = $("model").value;
  current.system_prompt = $("system-prompt").value;
  current.sampling = sampling;
}

// --- images for vision models ---------------------------------------------------------

function attach(event) {
  for (const file of event.target.files) {
    const reader = new FileReader();
    reader.addEventListener("load", () => {
      attached.push(reader.result);
      $("attached").textContent = `${attached.length} image(s) attached`;
    });
    reader.readAsDataURL(file);
  }
  event.target.value = "";
}

function clearAttached() {
  attached = [];
  $("attached").textContent = "";
}

// --- turns on the page ----------------------------------------------------------------

function turnElement(turn) {
  const item = node("li", `turn ${turn.role}`);
  item.append(node("div", "role", turn.role === "user" ? "You" : current.model));
  if (turn.role === "user") {
    item.append(node("div", "content plain", turn.content));
    for (const url of turn.images || []) {
      if (!url.startsWith("data:image/")) continue;
      const image = node("img", "attached-image");
      image.src = url;
      image.alt = "attached image";
      item.append(image);
    }
    return item;
  }
  const reasoning = node("details", "reasoning");
  reasoning.append(node("summary", "", "Reasoning"), node("div", "reasoning-text"));
  item.append(reasoning, node("div", "tool-calls"), node("div", "content markdown"), node("div", "meta"));
  fillAnswer(item, turn);
  return item;
}

function fillAnswer(item, turn) {
  const reasoning = item.querySelector(".reasoning");
  reasoning.hidden = !turn.reasoning;
  item.querySelector(".reasoning-text").textContent = turn.reasoning || "";
  const calls = item.querySelector(".tool-calls");
  calls.replaceChildren(...(turn.tool_calls || []).map((call) => {
    const box = node("div", "tool-call");
    box.append(node("code", "tool-name", call.function.name || "(unnamed)"));
    box.append(node("pre", "tool-arguments", call.function.arguments || ""));
    return box;
  }));
  item.querySelector(".content").replaceChildren(window.markdown.render(turn.content || ""));
  item.querySelector(".meta").replaceChildren(...metaNodes(turn));
}

function metaNodes(turn) {
  if (!turn.finish_reason) return [];
  const reasons = {
    stop: "finished",
    length: "cut off: max tokens reached",
    tool_calls: "tool calls",
    content_filter: "stopped by a filter",
    stopped: "stopped by you",
  };
  const parts = [node("span", `finish finish-${turn.finish_reason}`, reasons[turn.finish_reason] || turn.finish_reason)];
  if (turn.usage) parts.push(node("span", "tokens", `${turn.usage.prompt_tokens} prompt + ${turn.usage.completion_tokens} generated tokens`));
  if (turn.tokens_per_second) {
    const overall = turn.speed_overall ? " overall" : "";
    parts.push(node("span", "speed", `${turn.tokens_per_second.toFixed(1)} tok/s${overall}`));
  }
  if (turn.first_token_seconds !== undefined) parts.push(node("span", "ttft", `first token ${turn.first_token_seconds.toFixed(2)} s`));
  return parts;
}

// --- sending and streaming --------------------------------------------------------------

function wireMessages() {
  const messages = current.system_prompt ? [{ role: "system", content: current.system_prompt }] : [];
  for (const turn of current.turns) {
    if (turn.role === "user" && turn.images && turn.images.length) {
      const parts = [{ type: "text", text: turn.content }];
      for (const url of turn.images) parts.push({ type: "image_url", image_url: { url } });
      messages.push({ role: "user", content: parts });
    } else if (turn.role === "assistant" && turn.tool_calls && turn.tool_calls.length) {
      messages.push({ role: "assistant", content: turn.content, tool_calls: turn.tool_calls });
    } else {
      messages.push({ role: turn.role, content: turn.content });
    }
  }
  return messages;
}

async function send(event) {
  event.preventDefault();
  if (controller) return;
  const content = $("prompt").value;
  if (!content.trim() && !attached.length) return;
  try {
    readSettings();
  } catch (error) {
    return showError(error);
  }
  const turn = { role: "user", content };
  if (attached.length) turn.images = attached;
  current.turns.push(turn);
  $("messages").append(turnElement(turn));
  $("prompt").value = "";
  clearAttached();
  await generate();
}

async function regenerate() {
  if (controller) return;
  try {
    readSettings();
  } catch (error) {
    return showError(error);
  }
  if (current.turns.length && current.turns[current.turns.length - 1].role === "assistant") {
    current.turns.pop();
    $("messages").lastElementChild.remove();
  }
  if (current.turns.length) await generate();
}

async function generate() {
  const turn = { role: "assistant", content: "", reasoning: "", tool_calls: [] };
  const item = turnElement(turn);
  $("messages").append(item);
  item.scrollIntoView({ block: "end" });
  busy(true);
  controller = new AbortController();
  const clock = { start: performance.now(), first: null };
  try {
    const response = await fetch("/dashboard/chat", {
      method: "POST",
      headers: { "Content-Type": "application/json", "X-CSRFToken": csrf() },
      credentials: "same-origin",
      body: JSON.stringify(requestBody()),
      signal: controller.signal,
    });
    if (!response.ok) {
      const error = await response.json().catch(() => ({}));
      throw new Error((error.error && error.error.message) || `HTTP ${response.status}`);
    }
    await readAnswer(response.body.getReader(), item, turn, clock);
    current.turns.push(turn);
  } catch (error) {
    if (error.name !== "AbortError") {
      item.remove();
      busy(false);
      return showError(error);
    }
    turn.finish_reason = "stopped";
    current.turns.push(turn);
  }
  finishTiming(turn, clock);
  fillAnswer(item, turn);
  busy(false);
  await save().catch(showError);
}

function requestBody() {
  const { tools, ...sampling } = current.sampling;
  const body = {
    model: current.model,
    messages: wireMessages(),
    ...sampling,
    stream: true,
    stream_options: { include_usage: true },
  };
  if (tools) body.tools = tools;
  return body;
}

// Parsed as SSE (sse.js): the server's keep-alive comments while a long prompt is read, or a
// request waits, are skipped instead of read as JSON.
async function readAnswer(reader, item, turn, clock) {
  let drawn = false;
  for await (const { data } of sseEvents(reader)) {
    if (data === "[DONE]") break;
    const chunk = JSON.parse(data);
    if (chunk.error) throw new Error(chunk.error.message);
    for (const choice of chunk.choices) {
      const delta = choice.delta || {};
      // The first chunk only names the role; the first token is the first text or call.
      if (clock.first === null && (delta.content || delta.reasoning_content || delta.reasoning || delta.tool_calls)) {
        clock.first = performance.now();
        setStatus("generating…");
      }
      addDelta(turn, delta);
      if (choice.finish_reason) turn.finish_reason = choice.finish_reason;
    }
    if (chunk.usage) turn.usage = chunk.usage;
    if (!drawn) {  // at most one redraw a frame, however fast the tokens come
      drawn = true;
      requestAnimationFrame(() => { drawn = false; fillAnswer(item, turn); });
    }
  }
}

function addDelta(turn, delta) {
  turn.content += delta.content || "";
  turn.reasoning += delta.reasoning_content || delta.reasoning || "";
  for (const call of delta.tool_calls || []) {
    const known = turn.tool_calls[call.index] ||= { id: call.id, type: "function", function: { name: "", arguments: "" } };
    if (call.id) known.id = call.id;
    if (call.function) {
      known.function.name += call.function.name || "";
      known.function.arguments += call.function.arguments || "";
    }
  }
}

function finishTiming(turn, clock) {
  const end = performance.now();
  if (clock.first === null) return;
  turn.first_token_seconds = (clock.first - clock.start) / 1000;
  // The tokens after the first over the time they took. When they arrived in one burst (a
  // busy machine can hand the page a whole answer in one read), that span says nothing: the
  // rate is then over the whole request, prompt included, and says so.
  const generated = turn.usage ? turn.usage.completion_tokens : 0;
  delete turn.speed_overall;
  if (generated > 1 && end - clock.first >= 20) {
    turn.tokens_per_second = (generated - 1) / ((end - clock.first) / 1000);
  } else if (generated > 0 && end > clock.start) {
    turn.tokens_per_second = generated / ((end - clock.start) / 1000);
    turn.speed_overall = true;
  }
}

async function save() {
  const fields = {
    model: current.model,
    system_prompt: current.system_prompt,
    sampling: current.sampling,
    turns: current.turns,
  };
  if (current.id === null) {
    const first = current.turns.find((turn) => turn.role === "user");
    fields.title = (first ? first.content : "").replace(/\s+/g, " ").trim().slice(0, 60) || "Untitled";
    const created = await api("/dashboard/conversations", "POST", fields);
    current.id = created.id;
    current.title = created.title;
    remember(current.id);
    $("conversation-title").textContent = current.title;
    $("rename").disabled = $("delete").disabled = false;
  } else {
    await api(`/dashboard/conversations/${current.id}`, "PATCH", fields);
  }
  await refreshList();
}

function busy(on) {
  $("send").disabled = on;
  $("regenerate").disabled = on || !current.turns.length;
  $("stop").disabled = !on;
  $("new-conversation").disabled = on;
  if (on) setStatus("reading the prompt…");
  else {
    controller = null;
    setStatus("");
  }
}

function setStatus(message, className = "muted") {
  $("status").textContent = message;
  $("status").className = className;
}

function showError(error) {
  setStatus(`error: ${error.message}`, "error");
}

// --- wiring -----------------------------------------------------------------------------

$("composer").addEventListener("submit", send);
$("prompt").addEventListener("keydown", (event) => {
  if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
    event.preventDefault();
    $("composer").requestSubmit();
  }
});
$("stop").addEventListener("click", () => controller && controller.abort());
$("regenerate").addEventListener("click", () => regenerate().catch(showError));
$("new-conversation").addEventListener("click", newConversation);
$("rename").addEventListener("click", startRename);
$("title-input").addEventListener("keydown", (event) => {
  if (event.key === "Enter") finishRename(true).catch(showError);
  if (event.key === "Escape") finishRename(false).catch(showError);
});
$("title-input").addEventListener("blur", () => finishRename(true).catch(showError));
$("delete").addEventListener("click", () => deleteConversation().catch(showError));
$("model").addEventListener("change", showDefaults);
$("attach").addEventListener("change", attach);

showDefaults();
const opened = new URLSearchParams(location.search).get("conversation");
(opened ? openConversation(Number(opened)) : refreshList()).catch(showError);
