// Markdown -> DOM for the chat page, built only with createElement and text nodes: a model's text is
// data, and no string of it is ever parsed as HTML, so `<img onerror=...>` or `<script>` in an answer
// shows as those characters. Links keep only http:, https: and mailto: targets; anything else
// (javascript:, data:) stays text. Covers what chat answers use: fenced code (coloured, with a Copy button),
// inline code, headings, bold, italics, lists, block quotes, rules and paragraphs.
"use strict";

const SAFE_LINK = /^(https?:\/\/|mailto:)/i;

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

// `code`, **bold**, *italic* / _italic_, [text](url), bare https:// links -> nodes appended to `parent`
function inline(parent, text) {
  const pattern = /(`+)([\s\S]*?[^`])\1(?!`)|\*\*([^*]+)\*\*|__([^_]+)__|\*([^*\s][^*]*)\*|\b_([^_\s][^_]*)_\b|\[([^\]]+)\]\(([^)\s]+)\)|(https?:\/\/[^\s<>()]+[^\s<>().,;:!?'"])/g;
  let at = 0, m;
  while ((m = pattern.exec(text)) !== null) {
    if (m.index > at) parent.append(document.createTextNode(text.slice(at, m.index)));
    if (m[2] !== undefined) parent.append(el("code", null, m[2]));
    else if (m[3] !== undefined || m[4] !== undefined) inline(parent.appendChild(el("strong")), m[3] ?? m[4]);
    else if (m[5] !== undefined || m[6] !== undefined) inline(parent.appendChild(el("em")), m[5] ?? m[6]);
    else if (m[7] !== undefined) link(parent, m[7], m[8]);
    else link(parent, m[9], m[9]);
    at = pattern.lastIndex;
  }
  if (at < text.length) parent.append(document.createTextNode(text.slice(at)));
}

function link(parent, label, href) {
  if (!SAFE_LINK.test(href)) {
    parent.append(document.createTextNode(label === href ? href : `[${label}](${href})`));
    return;
  }
  const a = el("a");
  a.href = href;
  a.rel = "noopener noreferrer nofollow";
  a.target = "_blank";
  inline(a, label);
  parent.append(a);
}

// Syntax colours for code blocks, by a small lexer over comments, strings, numbers and the keywords of
// the languages answers use most; each token becomes a <span> holding its characters as text.
const KEYWORDS = new Set(("and as assert async await break case catch class const continue def default del do elif " +
  "else enum except export extends false finally fn for from func function go if impl import in interface is " +
  "lambda let loop match mod mut new nil none not null or package pass pub raise return self static struct " +
  "super switch this throw true try type typeof use var void while with yield int float char bool string " +
  "echo then fi done esac local").split(" "));
const HASH_COMMENTS = new Set(["python", "py", "sh", "bash", "shell", "zsh", "ruby", "rb", "yaml", "yml", "toml",
                               "r", "perl", "dockerfile", "makefile", "ini", "conf"]);
const LEXER = /(\/\/[^\n]*|\/\*[\s\S]*?\*\/)|(#[^\n]*)|("(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*'|`(?:\\.|[^`\\])*`)|(\b0x[0-9a-f]+\b|\b\d[\d_]*(?:\.\d+)?(?:e[+-]?\d+)?\b)|([A-Za-z_]\w*)/gi;

function highlight(code, lang, text) {
  const hash = HASH_COMMENTS.has(lang.toLowerCase());
  let at = 0, m;
  const span = (cls, t) => code.append(el("span", "tok-" + cls, t));
  while ((m = LEXER.exec(text)) !== null) {
    if (m.index > at) code.append(document.createTextNode(text.slice(at, m.index)));
    if (m[1] !== undefined && !hash) span("comment", m[1]);
    else if (m[2] !== undefined && hash) span("comment", m[2]);
    else if (m[3] !== undefined) span("string", m[3]);
    else if (m[4] !== undefined) span("number", m[4]);
    else if (m[5] !== undefined && KEYWORDS.has(m[5])) span("keyword", m[5]);
    else code.append(document.createTextNode(m[0]));
    at = LEXER.lastIndex;
  }
  if (at < text.length) code.append(document.createTextNode(text.slice(at)));
}

function codeBlock(lang, lines) {
  const wrap = el("div", "code");
  const bar = el("div", "code-bar");
  bar.append(el("span", "lang", lang || "text"));
  const copy = el("button", "copy", "Copy");
  copy.type = "button";
  const text = lines.join("\n");
  copy.addEventListener("click", () => {
    navigator.clipboard?.writeText(text).then(() => { copy.textContent = "Copied"; }, () => {});
    setTimeout(() => { copy.textContent = "Copy"; }, 1500);
  });
  bar.append(copy);
  const pre = el("pre");
  const code = el("code", lang ? "language-" + lang.replace(/[^\w+-]/g, "") : null);
  highlight(code, lang || "", text);
  pre.append(code);
  wrap.append(bar, pre);
  return wrap;
}

// The whole text as a DocumentFragment of blocks; an unclosed fence (still streaming) is a code block too.
function renderMarkdown(source) {
  const out = document.createDocumentFragment();
  const lines = source.replace(/\r\n?/g, "\n").split("\n");
  let para = [], list = null;
  const flush = () => {
    if (para.length) {
      const p = el("p");
      para.forEach((line, i) => { if (i) p.append(el("br")); inline(p, line); });
      out.append(p);
      para = [];
    }
    list = null;
  };
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i];
    const fence = line.match(/^\s*(```+|~~~+)\s*([\w+#.-]*)\s*$/);
    if (fence) {
      flush();
      const body = [];
      for (i++; i < lines.length && !lines[i].trim().startsWith(fence[1]); i++) body.push(lines[i]);
      out.append(codeBlock(fence[2], body));
      continue;
    }
    const heading = line.match(/^(#{1,6})\s+(.*)$/);
    const bullet = line.match(/^\s*([-*+])\s+(.*)$/);
    const numbered = line.match(/^\s*(\d{1,9})[.)]\s+(.*)$/);
    const quote = line.match(/^\s*>\s?(.*)$/);
    if (!line.trim()) { flush(); continue; }
    if (heading) { flush(); inline(out.appendChild(el("h" + Math.min(6, heading[1].length + 2))), heading[2]); continue; }
    if (/^\s*([-*_])(\s*\1){2,}\s*$/.test(line)) { flush(); out.append(el("hr")); continue; }
    if (quote) { flush(); inline(out.appendChild(el("blockquote")), quote[1]); continue; }
    if (bullet || numbered) {
      const tag = bullet ? "ul" : "ol";
      if (para.length) flush();
      if (!list || list.tagName.toLowerCase() !== tag) {
        list = out.appendChild(el(tag));
        if (numbered && numbered[1] !== "1") list.start = Number(numbered[1]);
      }
      inline(list.appendChild(el("li")), (bullet || numbered)[2]);
      continue;
    }
    if (list && /^\s{2,}\S/.test(line)) {  // a list item's continuation line
      const item = list.lastElementChild;
      item.append(document.createTextNode(" "));
      inline(item, line.trim());
      continue;
    }
    list = null;
    para.push(line);
  }
  flush();
  return out;
}

window.renderMarkdown = renderMarkdown;
