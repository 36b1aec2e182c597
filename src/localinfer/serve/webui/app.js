// The chat page of `localinfer serve`: talks to the server's public API only (/v1/models,
// /v1/chat/completions streamed as Server-Sent Events, /props). Conversations live in this browser
// (localStorage): a list to switch, rename and delete; an answer can be regenerated and a question
// edited and sent again. Answers are rendered by markdown.js, which never parses model text as HTML.
"use strict";

const $ = (id) => document.getElementById(id);
// kept in localStorage; the sampling fields go into every request when set
const SETTINGS = ["system-prompt", "temperature", "top-p", "top-k", "min-p", "repeat-penalty", "seed", "max-tokens",
                  "api-key"];
const SAMPLING = { "temperature": "temperature", "top-p": "top_p", "top-k": "top_k", "min-p": "min_p",
                   "repeat-penalty": "repeat_penalty", "seed": "seed", "max-tokens": "max_tokens" };
const STORE = "localinfer.chats";

let chats = [];         // {id, title, model, messages: [{role, content, meta, finish}], updated}
let current = null;     // the chat on screen
let running = null;     // {controller, chat} of the answer being streamed
let defaultModel = "";

function save() {
  try { localStorage.setItem(STORE, JSON.stringify(chats)); } catch (_) { /* full or private mode */ }
  localStorage.setItem(STORE + ".current", current ? current.id : "");
}

function load() {
  try { chats = JSON.parse(localStorage.getItem(STORE) || "[]"); } catch (_) { chats = []; }
  if (!Array.isArray(chats)) chats = [];
  chats = chats.filter((c) => c && typeof c.id === "string" && Array.isArray(c.messages));
  const id = localStorage.getItem(STORE + ".current");
  current = chats.find((c) => c.id === id) || null;
}

function requestHeaders() {
  const h = { "Content-Type": "application/json" };
  const key = $("api-key").value.trim();
  if (key) h["Authorization"] = "Bearer " + key;
  return h;
}

function setStatus(text) { $("status").textContent = text; }

async function errorText(response) {
  try {
    const body = await response.json();
    return (body.error && body.error.message) || response.statusText;
  } catch (_) {
    return response.status + " " + response.statusText;
  }
}

async function loadServer() {
  try {
    const r = await fetch("props", { headers: requestHeaders() });
    if (!r.ok) throw new Error(await errorText(r));
    const p = await r.json();
    defaultModel = p.model;
    $("model-name").textContent = p.model;
    $("model-ctx").textContent = p.n_ctx + " tokens context";
    const m = await fetch("v1/models", { headers: requestHeaders() });
    const names = m.ok ? (await m.json()).data.map((x) => x.id) : [p.model];
    const pick = $("model");
    const keep = pick.value;
    pick.replaceChildren(...names.map((n) => { const o = document.createElement("option"); o.value = o.textContent = n; return o; }));
    pick.value = (current && names.includes(current.model)) ? current.model : names.includes(keep) ? keep : p.model;
    pick.hidden = names.length < 2;
    $("model-name").hidden = names.length >= 2;
    setStatus("");
  } catch (e) {
    $("model-name").textContent = "?";
    setStatus(e.message);
  }
}

// -- the conversation list ---------------------------------------------------------------------------

function button(className, text, label, onClick) {
  const b = document.createElement("button");
  b.type = "button";
  b.className = className;
  b.textContent = text;
  b.title = label;
  if (label !== text) b.setAttribute("aria-label", label);
  b.addEventListener("click", onClick);
  return b;
}

function newChat() {
  if (running) running.controller.abort();
  current = null;
  save();
  render();
  $("input").focus();
}

function startChat(firstText) {
  const chat = { id: Date.now().toString(36) + Math.random().toString(36).slice(2, 8),
                 title: firstText.slice(0, 48), model: $("model").value || defaultModel, messages: [], updated: Date.now() };
  chats.unshift(chat);
  current = chat;
  return chat;
}

function renderList() {
  const list = $("chats");
  list.replaceChildren();
  for (const chat of chats) {
    const item = document.createElement("li");
    item.className = "chat" + (chat === current ? " current" : "");
    item.dataset.id = chat.id;
    const open = button("open", chat.title || "(untitled)", chat.title, () => {
      if (running) running.controller.abort();
      current = chat;
      save();
      render();
      closeMenu();
    });
    const rename = button("rename", "✎", "Rename", () => {
      const title = window.prompt("Name of this conversation", chat.title);
      if (title !== null && title.trim()) { chat.title = title.trim().slice(0, 80); save(); renderList(); }
    });
    const remove = button("delete", "✕", "Delete", () => {
      if (!window.confirm(`Delete “${chat.title}”?`)) return;
      if (running && running.chat === chat) running.controller.abort();
      chats = chats.filter((c) => c !== chat);
      if (current === chat) current = null;
      save();
      render();
    });
    item.append(open, rename, remove);
    list.append(item);
  }
}

// -- messages ------------------------------------------------------------------------------------------

function messageBox(message, index) {
  const box = document.createElement("div");
  box.className = "msg " + message.role;
  box.dataset.index = index;
  if (message.finish) box.dataset.finish = message.finish;
  if (message.finish === "error") box.classList.add("error");
  const who = document.createElement("div");
  who.className = "role";
  who.textContent = message.role === "user" ? "You" : "Assistant";
  const body = document.createElement("div");
  body.className = "text";
  fill(body, message);
  const meta = document.createElement("div");
  meta.className = "meta";
  meta.textContent = message.meta || "";
  const actions = document.createElement("div");
  actions.className = "actions";
  const action = (label, handler) => actions.append(button(label.toLowerCase(), label, label, handler));
  if (message.role === "user") action("Edit", () => edit(index));
  else {
    action("Copy", () => navigator.clipboard?.writeText(message.content));
    action("Regenerate", () => regenerate(index));
  }
  box.append(who, body, meta, actions);
  return box;
}

function fill(body, message) {
  if (message.role === "assistant") body.replaceChildren(window.renderMarkdown(message.content));
  else body.textContent = message.content;
}

function render() {
  renderList();
  const box = $("messages");
  box.replaceChildren(...(current ? current.messages.map(messageBox) : []));
  box.lastElementChild?.scrollIntoView({ block: "end" });
  if (current && $("model").querySelector(`option[value="${CSS.escape(current.model)}"]`)) $("model").value = current.model;
  document.title = current ? current.title + " · localinfer" : "localinfer chat";
}

function edit(index) {
  if (running || !current) return;
  const message = current.messages[index];
  current.messages.length = index;  // the question and all after it: sent again once edited
  current.updated = Date.now();
  save();
  render();
  $("input").value = message.content;
  $("input").focus();
}

function regenerate(index) {
  if (running || !current) return;
  current.messages.length = index;   // the answer and all after it
  save();
  render();
  answer(current);
}

// -- sending ---------------------------------------------------------------------------------------------

// Yields the parsed JSON of each `data:` event of an SSE response body, until [DONE].
async function* sseEvents(response) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += decoder.decode(value, { stream: true });
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const event = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      for (const line of event.split("\n")) {
        if (!line.startsWith("data: ")) continue;
        const data = line.slice(6);
        if (data === "[DONE]") return;
        yield JSON.parse(data);
      }
    }
  }
}

// A field's value as a number when it is one; anything else as typed, for the server to refuse by name.
function numberField(id) {
  const v = $(id).value.trim();
  return v !== "" && Number.isFinite(Number(v)) ? Number(v) : v;
}

function stats(timings, usage, chunks, first, started, finish) {
  const parts = [];
  const n = timings ? timings.predicted_n : usage ? usage.completion_tokens : chunks;
  parts.push(n + " tokens");
  if (timings && timings.predicted_per_second) parts.push(timings.predicted_per_second.toFixed(1) + " tok/s");
  if (timings) parts.push(`prompt ${timings.prompt_n + timings.cache_n} tokens (${timings.cache_n} cached` +
                          (timings.prompt_per_second ? `, ${timings.prompt_per_second.toFixed(0)} tok/s)` : ")"));
  parts.push("first token " + ((first || performance.now()) - started).toFixed(0) + " ms");
  if (finish === "length") parts.push("stopped at max tokens");
  return parts.join(" · ");
}

function send(text) {
  const chat = current || startChat(text);
  chat.messages.push({ role: "user", content: text });
  chat.updated = Date.now();
  save();
  render();
  answer(chat);
}

async function answer(chat) {
  const system = $("system-prompt").value.trim();
  const history = [];   // what the model reads: a failed turn (its question too) is not sent again
  for (const m of chat.messages) {
    if (m.finish === "error") history.pop();
    else history.push({ role: m.role, content: m.content });
  }
  const message = { role: "assistant", content: "", meta: "" };
  chat.messages.push(message);
  const index = chat.messages.length - 1;
  let box = null;
  const shown = () => chat === current;
  if (shown()) {
    box = messageBox(message, index);
    box.classList.add("streaming");
    $("messages").append(box);
    box.scrollIntoView({ block: "end" });
  }
  const body = { model: chat.model || $("model").value || undefined, stream: true,
                 stream_options: { include_usage: true },
                 messages: (system ? [{ role: "system", content: system }] : []).concat(history) };
  for (const [id, field] of Object.entries(SAMPLING)) if ($(id).value.trim() !== "") body[field] = numberField(id);
  running = { controller: new AbortController(), chat };
  $("stop").disabled = false;
  $("send").disabled = true;
  const started = performance.now();
  let first = 0, chunks = 0, usage = null, timings = null, finish = null, drawn = 0;
  const draw = () => {  // at most once a frame: a long answer re-rendered per token would lag
    drawn = 0;
    if (box && shown()) { fill(box.querySelector(".text"), message); box.scrollIntoView({ block: "end" }); }
  };
  try {
    const r = await fetch("v1/chat/completions", {
      method: "POST", headers: requestHeaders(), body: JSON.stringify(body), signal: running.controller.signal,
    });
    if (!r.ok) throw new Error(await errorText(r));
    for await (const event of sseEvents(r)) {
      if (event.error) throw new Error(event.error.message);
      if (event.usage) usage = event.usage;
      if (event.timings) timings = event.timings;
      const choice = event.choices && event.choices[0];
      if (!choice) continue;
      if (choice.finish_reason) finish = choice.finish_reason;
      const piece = choice.delta && choice.delta.content;
      if (piece) {
        if (!first) first = performance.now();
        chunks += 1;
        message.content += piece;
        if (!drawn) drawn = requestAnimationFrame(draw);
      }
    }
    message.meta = stats(timings, usage, chunks, first, started, finish);
    message.finish = finish || "stop";
  } catch (e) {
    if (e.name === "AbortError") {
      message.meta = "stopped · " + chunks + " chunks";
      message.finish = "stopped";
    } else {
      message.meta = "error: " + e.message;
      message.finish = "error";
    }
  } finally {
    if (drawn) cancelAnimationFrame(drawn);
    chat.updated = Date.now();
    running = null;
    save();
    if (box && shown()) {  // the same element, finished: a reader holding it sees the end
      fill(box.querySelector(".text"), message);
      box.querySelector(".meta").textContent = message.meta;
      box.classList.remove("streaming");
      box.classList.toggle("error", message.finish === "error");
      box.dataset.finish = message.finish;
    }
    $("messages").lastElementChild?.scrollIntoView({ block: "end" });
    $("stop").disabled = true;
    $("send").disabled = false;
  }
}

function closeMenu() { document.body.classList.remove("menu-open"); }

function init() {
  for (const id of SETTINGS) {
    const saved = localStorage.getItem("localinfer." + id);
    if (saved !== null) $(id).value = saved;
    $(id).addEventListener("change", () => localStorage.setItem("localinfer." + id, $(id).value));
  }
  load();
  $("api-key").addEventListener("change", loadServer);
  $("model").addEventListener("change", () => {
    if (current && !current.messages.length) current.model = $("model").value;
    if (current && current.model !== $("model").value) current = null;  // another model: a new conversation
    save();
    render();
  });
  $("composer").addEventListener("submit", (e) => {
    e.preventDefault();
    const text = $("input").value.trim();
    if (!text || running) return;
    $("input").value = "";
    send(text);
  });
  $("input").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      $("composer").requestSubmit();
    }
  });
  document.addEventListener("keydown", (e) => {
    if (e.key === "Escape" && running) running.controller.abort();
  });
  $("stop").addEventListener("click", () => { if (running) running.controller.abort(); });
  $("new-chat").addEventListener("click", () => { newChat(); closeMenu(); });
  $("menu").addEventListener("click", () => document.body.classList.toggle("menu-open"));
  document.querySelector("main").addEventListener("click", closeMenu);
  render();
  loadServer();
}

init();
