// The chat page of `localinfer serve`: talks to the server's OpenAI-compatible API only
// (/v1/chat/completions streamed as Server-Sent Events, /props for the model's name and context).
// Model text is only ever set as textContent: it is data, never markup.
"use strict";

const $ = (id) => document.getElementById(id);
const SETTINGS = ["system-prompt", "temperature", "max-tokens", "api-key"];  // kept in localStorage
const history = [];   // {role, content} of the conversation so far, as the API takes it
let running = null;   // the AbortController of the answer being streamed, if any
let conversation = 0; // counts New chat: an answer stopped by it must not land in the next one

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

async function loadProps() {
  try {
    const r = await fetch("props", { headers: requestHeaders() });
    if (!r.ok) throw new Error(await errorText(r));
    const p = await r.json();
    $("model-name").textContent = p.model;
    $("model-ctx").textContent = p.n_ctx + " tokens context";
    setStatus("");
  } catch (e) {
    $("model-name").textContent = "?";
    setStatus(e.message);
  }
}

function addMessage(role, text) {
  const box = document.createElement("div");
  box.className = "msg " + role;
  const who = document.createElement("div");
  who.className = "role";
  who.textContent = role === "user" ? "You" : "Assistant";
  const body = document.createElement("div");
  body.className = "text";
  body.textContent = text;
  const meta = document.createElement("div");
  meta.className = "meta";
  box.append(who, body, meta);
  $("messages").append(box);
  box.scrollIntoView({ block: "end" });
  return { box, body, meta };
}

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

// A number field's value as a number; anything else as typed, for the server to refuse by name.
function numberField(id) {
  const v = $(id).value.trim();
  return v !== "" && Number.isFinite(Number(v)) ? Number(v) : v;
}

function speed(tokens, first, last) {
  // decode speed: the tokens after the first one over the time they took
  if (tokens < 2 || last <= first) return "";
  return " · " + ((tokens - 1) / ((last - first) / 1000)).toFixed(1) + " tok/s";
}

async function send(text) {
  const system = $("system-prompt").value.trim();
  history.push({ role: "user", content: text });
  addMessage("user", text);
  const answer = addMessage("assistant", "");
  answer.box.classList.add("streaming");
  const messages = (system ? [{ role: "system", content: system }] : []).concat(history);
  const body = {
    messages, stream: true, stream_options: { include_usage: true },
    temperature: numberField("temperature"), max_tokens: numberField("max-tokens"),
  };
  running = new AbortController();
  const mine = conversation;
  $("stop").disabled = false;
  $("send").disabled = true;
  const started = performance.now();
  let first = 0, last = 0, chunks = 0, usage = null, finish = null, content = "";
  try {
    const r = await fetch("v1/chat/completions", {
      method: "POST", headers: requestHeaders(), body: JSON.stringify(body), signal: running.signal,
    });
    if (!r.ok) throw new Error(await errorText(r));
    for await (const event of sseEvents(r)) {
      if (event.error) throw new Error(event.error.message);
      if (event.usage) usage = event.usage;
      const choice = event.choices && event.choices[0];
      if (!choice) continue;
      if (choice.finish_reason) finish = choice.finish_reason;
      const piece = choice.delta && choice.delta.content;
      if (piece) {
        last = performance.now();
        if (!first) first = last;
        chunks += 1;
        content += piece;
        answer.body.textContent = content;
        answer.box.scrollIntoView({ block: "end" });
      }
    }
    const tokens = usage ? usage.completion_tokens : chunks;
    answer.meta.textContent = tokens + " tokens" + speed(tokens, first, last) +
      " · first token " + ((first || performance.now()) - started).toFixed(0) + " ms" +
      (finish === "length" ? " · stopped at max tokens" : "");
    answer.box.dataset.finish = finish || "";
  } catch (e) {
    if (e.name === "AbortError") {
      answer.meta.textContent = "stopped · " + chunks + " chunks" + speed(chunks, first, last);
      answer.box.dataset.finish = "stopped";
    } else {
      answer.box.classList.add("error");
      answer.meta.textContent = "error: " + e.message;
      answer.box.dataset.finish = "error";
    }
  } finally {
    answer.box.classList.remove("streaming");
    answer.box.scrollIntoView({ block: "end" });  // its last line (the meta) is new
    if (mine === conversation) {
      if (content) history.push({ role: "assistant", content });
      else if (answer.box.dataset.finish === "error") history.pop();  // a failed turn is not resent
    }
    running = null;
    $("stop").disabled = true;
    $("send").disabled = false;
  }
}

function newChat() {
  if (running) running.abort();
  conversation += 1;
  history.length = 0;
  $("messages").replaceChildren();
  $("input").focus();
}

function init() {
  for (const id of SETTINGS) {
    const saved = localStorage.getItem("localinfer." + id);
    if (saved !== null) $(id).value = saved;
    $(id).addEventListener("change", () => localStorage.setItem("localinfer." + id, $(id).value));
  }
  $("api-key").addEventListener("change", loadProps);
  $("composer").addEventListener("submit", (e) => {
    e.preventDefault();
    const text = $("input").value.trim();
    if (!text || running) return;
    $("input").value = "";
    send(text);
  });
  $("input").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey) {
      e.preventDefault();
      $("composer").requestSubmit();
    }
  });
  $("stop").addEventListener("click", () => { if (running) running.abort(); });
  $("new-chat").addEventListener("click", newChat);
  loadProps();
}

init();
