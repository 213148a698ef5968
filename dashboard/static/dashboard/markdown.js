// Markdown for the chat page, rendered safely: the answer's text only ever reaches the page
// through text nodes (never innerHTML), and a link is kept only for http(s) URLs. Covers what
// models write: fenced code, headings, lists, quotes, rules, paragraphs, inline code, bold,
// italic and links. An unclosed fence (an answer still streaming) is shown as code so far.
"use strict";

(() => {
  const FENCE = /^\s*(`{3,}|~{3,})\s*([\w+#.-]*)/;
  const HEADING = /^(#{1,6})\s+(.*)$/;
  const BULLET = /^\s*[-*+]\s+(.*)$/;
  const NUMBERED = /^\s*(\d{1,9})[.)]\s+(.*)$/;
  const QUOTE = /^\s*>\s?(.*)$/;
  const RULE = /^\s*([-*_])(\s*\1){2,}\s*$/;
  // Inline spans, earliest match first: code, bold, italic, link.
  const INLINE = [
    { re: /`([^`\n]+)`/, make: (m) => el("code", [text(m[1])]) },
    { re: /\*\*([^*\n]+?)\*\*|__([^_\n]+?)__/, make: (m) => el("strong", inline(m[1] || m[2])) },
    { re: /\*([^*\s][^*\n]*?)\*|\b_([^_\s][^_\n]*?)_\b/, make: (m) => el("em", inline(m[1] || m[2])) },
    { re: /\[([^\]\n]+)\]\((https?:\/\/[^\s)]+)\)/, make: link },
  ];

  function el(tag, children = [], attributes = {}) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attributes)) node.setAttribute(name, value);
    for (const child of children) node.append(child);
    return node;
  }

  function text(value) {
    return document.createTextNode(value);
  }

  function link(match) {
    const url = new URL(match[2]);  // the pattern already allows only http(s)
    return el("a", inline(match[1]), { href: url.href, rel: "noopener noreferrer", target: "_blank" });
  }

  function inline(source) {
    const nodes = [];
    let rest = source;
    while (rest) {
      let best = null;
      for (const rule of INLINE) {
        const match = rule.re.exec(rest);
        if (match && (!best || match.index < best.match.index)) best = { rule, match };
      }
      if (!best) break;
      if (best.match.index) nodes.push(text(rest.slice(0, best.match.index)));
      nodes.push(best.rule.make(best.match));
      rest = rest.slice(best.match.index + best.match[0].length);
    }
    if (rest) nodes.push(text(rest));
    return nodes;
  }

  function withBreaks(lines) {
    const nodes = [];
    lines.forEach((line, index) => {
      if (index) nodes.push(el("br"));
      nodes.push(...inline(line));
    });
    return nodes;
  }

  // Each reader takes the lines from `at` and returns [node, next index], or null.
  function fence(lines, at) {
    const open = FENCE.exec(lines[at]);
    if (!open) return null;
    let end = at + 1;
    while (end < lines.length && !lines[end].trim().startsWith(open[1])) end += 1;
    const code = el("code", [text(lines.slice(at + 1, end).join("\n"))]);
    if (open[2]) code.className = `language-${open[2]}`;
    return [el("pre", [code], open[2] ? { "data-language": open[2] } : {}), end + 1];
  }

  function heading(lines, at) {
    const match = HEADING.exec(lines[at]);
    return match && [el(`h${match[1].length}`, inline(match[2].replace(/\s+#+\s*$/, ""))), at + 1];
  }

  function rule(lines, at) {
    return RULE.test(lines[at]) ? [el("hr"), at + 1] : null;
  }

  function quote(lines, at) {
    const inner = [];
    let end = at;
    for (; end < lines.length && QUOTE.test(lines[end]); end += 1) inner.push(QUOTE.exec(lines[end])[1]);
    return inner.length ? [el("blockquote", [render(inner.join("\n"))]), end] : null;
  }

  function list(lines, at) {
    const ordered = NUMBERED.test(lines[at]);
    const pattern = ordered ? NUMBERED : BULLET;
    if (!pattern.test(lines[at])) return null;
    const items = [];
    let end = at;
    for (; end < lines.length && lines[end].trim(); end += 1) {
      const match = pattern.exec(lines[end]);
      if (match) items.push([match[match.length - 1]]);
      else items[items.length - 1].push(lines[end].trim());  // a wrapped item goes on
    }
    const start = ordered ? { start: NUMBERED.exec(lines[at])[1] } : {};
    return [el(ordered ? "ol" : "ul", items.map((item) => el("li", withBreaks(item))), start), end];
  }

  function paragraph(lines, at) {
    let end = at;
    while (end < lines.length && lines[end].trim() && (end === at || !startsBlock(lines[end]))) end += 1;
    return [el("p", withBreaks(lines.slice(at, end))), end];
  }

  const READERS = [fence, heading, rule, quote, list];

  function startsBlock(line) {
    return [FENCE, HEADING, RULE, QUOTE, BULLET, NUMBERED].some((pattern) => pattern.test(line));
  }

  function render(source) {
    const fragment = document.createDocumentFragment();
    const lines = source.replace(/\r\n?/g, "\n").split("\n");
    let at = 0;
    while (at < lines.length) {
      if (!lines[at].trim()) { at += 1; continue; }
      const [node, next] = READERS.reduce((found, read) => found || read(lines, at), null)
        || paragraph(lines, at);
      fragment.append(node);
      at = next;
    }
    return fragment;
  }

  window.markdown = { render };
})();
