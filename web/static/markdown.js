// A small Markdown renderer that builds DOM nodes and sets only
// textContent: model, tool and user text is never parsed as HTML, so a
// <script> or an onerror= in an answer shows as the characters it is.
//
// It knows what the answers use: paragraphs, # headings, - and 1. lists,
// ``` code blocks, and **bold**, *italic* and `code` inside a line.

/**
 * @param {Document} doc
 * @param {string} text
 * @returns {DocumentFragment}
 */
export function renderMarkdown(doc, text) {
  const out = doc.createDocumentFragment();
  const lines = String(text).replace(/\r\n?/g, "\n").split("\n");
  let para = [];
  let list = null; // the open <ul>/<ol>
  const flushPara = () => {
    if (para.length) {
      const p = doc.createElement("p");
      inline(doc, p, para.join(" "));
      out.append(p);
      para = [];
    }
  };
  const closeList = () => { list = null; };

  for (let i = 0; i < lines.length; i++) {
    const line = lines[i];
    if (line.startsWith("```")) {
      flushPara(); closeList();
      const code = [];
      for (i++; i < lines.length && !lines[i].startsWith("```"); i++) code.push(lines[i]);
      const pre = doc.createElement("pre");
      const c = doc.createElement("code");
      c.textContent = code.join("\n");
      pre.append(c);
      out.append(pre);
      continue;
    }
    const heading = /^(#{1,4})\s+(.*)$/.exec(line);
    if (heading) {
      flushPara(); closeList();
      const h = doc.createElement("h" + (heading[1].length + 2)); // h3..h6 inside the page
      inline(doc, h, heading[2]);
      out.append(h);
      continue;
    }
    const item = /^\s*(?:([-*+])|(\d+)[.)])\s+(.*)$/.exec(line);
    if (item) {
      flushPara();
      const tag = item[1] ? "UL" : "OL";
      if (!list || list.tagName !== tag) {
        list = doc.createElement(tag.toLowerCase());
        out.append(list);
      }
      const li = doc.createElement("li");
      inline(doc, li, item[3]);
      list.append(li);
      continue;
    }
    if (line.trim() === "") {
      flushPara(); closeList();
      continue;
    }
    closeList();
    para.push(line.trim());
  }
  flushPara();
  return out;
}

// inline appends text to el, with `code`, **bold** and *italic* spans.
function inline(doc, el, text) {
  const re = /`([^`]+)`|\*\*([^*]+)\*\*|\*([^*\s][^*]*)\*/g;
  let last = 0;
  for (let m; (m = re.exec(text)) !== null;) {
    if (m.index > last) el.append(doc.createTextNode(text.slice(last, m.index)));
    const span = doc.createElement(m[1] !== undefined ? "code" : m[2] !== undefined ? "strong" : "em");
    span.textContent = m[1] ?? m[2] ?? m[3];
    el.append(span);
    last = re.lastIndex;
  }
  if (last < text.length) el.append(doc.createTextNode(text.slice(last)));
}
