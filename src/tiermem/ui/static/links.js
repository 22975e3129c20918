// tiermem memory inspector: the Links section. Plain JavaScript and SVG, no library, no network beyond /ui/api.
// A memory (by id) in the middle, the memories it links to around it; a linked memory (click, Enter or Space) becomes
// the middle in turn.
"use strict";
(() => {
  const $ = (id) => document.getElementById(id);
  const SVG = "http://www.w3.org/2000/svg";
  const W = 760, H = 420, R = 150;

  const call = (path) => window.tiermemApi.call(path); // app.js: the token, and the prompt for one on a 401

  function svg(tag, attrs = {}, ...children) {
    const node = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
    for (const c of children) node.append(c);
    return node;
  }

  const short = (text, n) => (text.length > n ? text.slice(0, n - 1) + "…" : text);
  const PAD = 8; // px between a node's text and its box's edge

  // each line of a node's text, measured as drawn and cut (with an ellipsis) until it fits inside the node's box:
  // the head's note gives way first, then the rest of the line; the node's <title> holds the full text
  function fit(g) {
    const room = g.querySelector("rect").width.baseVal.value - 2 * PAD;
    for (const t of g.querySelectorAll("text")) {
      let cut = t.dataset.cut ?? t.textContent, keep = t.dataset.cut === undefined ? "" : t.dataset.keep;
      while (t.getComputedTextLength() > room && cut.length + keep.length > 1) {
        if (!cut.length) [cut, keep] = [keep, ""]; // the note is gone and the line still does not fit
        cut = cut.replace(/…$/, "").slice(0, -1).trimEnd();
        t.textContent = cut + "…" + keep;
      }
    }
  }

  function lines(text, width, most) {
    const out = [];
    let line = "";
    for (const word of text.split(/\s+/)) {
      if ((line + " " + word).trim().length > width) { out.push(line); line = word; } else line = (line + " " + word).trim();
      if (out.length === most) break;
    }
    if (out.length < most && line) out.push(line);
    if (out.length === most && out.join(" ").length < text.length) out[most - 1] = short(out[most - 1] + " …", width);
    return out;
  }

  function node(m, x, y, center, link) {
    const g = svg("g", { class: "ln-node " + m.kind + (center ? " center" : ""), "data-id": m.id,
      transform: `translate(${x},${y})` });
    const w = center ? 230 : 190, h = center ? 74 : 62;
    g.append(svg("rect", { x: -w / 2, y: -h / 2, width: w, height: h, rx: 8 }));
    const what = m.kind + (m.role ? " " + m.role : ""), day = m.timestamp.slice(0, 10);
    const note = link && link.note ? link.link + ": " + short(link.note, 60) : ""; // cut to the box once drawn
    if (note) { // the note, as much as fits, and what the memory is; its date is in the tooltip
      g.append(svg("text", { x: 0, y: -h / 2 + 14, class: "ln-head", "data-cut": note, "data-keep": " · " + what },
        note + " · " + what));
    } else {
      g.append(svg("text", { x: 0, y: -h / 2 + 14, class: "ln-head" },
        (link ? link.link + " · " : "") + what + " · " + day));
    }
    lines(m.content, center ? 34 : 28, 3).forEach((t, i) =>
      g.append(svg("text", { x: 0, y: -h / 2 + 30 + i * 13 }, t)));
    g.append(svg("title", {}, (link ? link.link + (link.note ? ": " + link.note : "") + "\n" : "") +
      `${what} · ${m.timestamp.replace("T", " ").slice(0, 16)}\n${m.id}\n${m.content}`));
    if (!center) {
      g.setAttribute("tabindex", "0");
      g.setAttribute("role", "button");
      const go = () => { $("ln-id").value = m.id; run(); };
      g.addEventListener("click", go);
      g.addEventListener("keydown", (e) => { if (e.key === "Enter" || e.key === " ") { e.preventDefault(); go(); } });
    }
    return g;
  }

  function draw(data) {
    const box = $("ln-graph");
    box.replaceChildren();
    const pic = svg("svg", { viewBox: `0 0 ${W} ${H}`, width: W, height: H, role: "img",
      "aria-label": `memory ${data.memory.id} and its ${data.links.length} links` });
    const cx = W / 2, cy = H / 2, n = data.links.length;
    const at = data.links.map((_, i) => {
      const a = -Math.PI / 2 + (2 * Math.PI * i) / Math.max(n, 1);
      return [cx + R * 1.55 * Math.cos(a), cy + R * Math.sin(a)];
    });
    at.forEach(([x, y], i) => {
      const kind = data.links[i].link;
      pic.append(svg("line", { x1: cx, y1: cy, x2: x, y2: y, class: "ln-edge " + kind, "data-kind": kind }));
    });
    data.links.forEach((l, i) => pic.append(node(l, at[i][0], at[i][1], false, l)));
    pic.append(node(data.memory, cx, cy, true, null));
    box.append(pic);
    pic.querySelectorAll(".ln-node").forEach(fit); // measured once drawn
    $("ln-summary").textContent = n ? `${n} link${n === 1 ? "" : "s"}` : "(no links)";
  }

  async function load() {
    const id = $("ln-id").value.trim();
    if (!id) return;
    const agent = $("agent").value;
    draw(await call("links?" + new URLSearchParams({ agent, id }).toString()));
  }

  let failed = null; // the error this section put in the page's alert, taken down once the section loads again
  const run = () => load().then(() => {
    const a = $("alert");
    if (failed !== null && !a.hidden && a.textContent === failed) { a.textContent = ""; a.hidden = true; }
    failed = null;
  }, (e) => { const a = $("alert"); a.textContent = failed = e.message; a.className = ""; a.hidden = false; });
  $("ln-form").addEventListener("submit", (e) => { e.preventDefault(); run(); });
})();
