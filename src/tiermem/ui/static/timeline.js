// tiermem memory inspector: the Timeline section. Plain JavaScript and SVG, no library, no network beyond /ui/api.
// Counts per period by kind as stacked bars; a bar (click, Enter or Space) lists what its period holds.
"use strict";
(() => {
  const $ = (id) => document.getElementById(id);
  const SVG = "http://www.w3.org/2000/svg";
  const KINDS = ["recall", "archival", "files", "blocks"];
  const NAMES = { recall: "conversation", archival: "archival", files: "file changes", blocks: "block versions" };
  const H = 240, LEFT = 40, BOTTOM = 22, TOP = 10;
  const state = { agent: null, data: null, period: null, gen: 0 };

  const call = (path) => window.tiermemApi.call(path); // app.js: the token, and the prompt for one on a 401

  let failed = null; // the error this section put in the page's alert, taken down once the section loads again

  function say(text) {
    const a = $("alert");
    a.textContent = text || ""; a.className = ""; a.hidden = !text;
    failed = text || null;
  }

  function recovered() { // only this section's own error: another section's message stays
    const a = $("alert");
    if (failed !== null && !a.hidden && a.textContent === failed) say("");
    failed = null;
  }

  const qs = (params) => new URLSearchParams(
    Object.entries(params).filter(([, v]) => v !== undefined && v !== null && v !== "")).toString();

  function svg(tag, attrs = {}, ...children) {
    const node = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
    for (const c of children) node.append(c);
    return node;
  }

  function el(tag, props = {}, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(props)) {
      if (k === "class") node.className = v; else if (k === "data") Object.assign(node.dataset, v); else node[k] = v;
    }
    for (const c of children) if (c !== null && c !== undefined) node.append(c);
    return node;
  }

  function filters() {
    return { agent: state.agent, by: $("tl-by").value, from: $("tl-from").value, to: $("tl-to").value,
      q: $("tl-query").value.trim() };
  }

  async function load() {
    state.agent = $("agent").value;
    if (!state.agent) return;
    const gen = ++state.gen;
    const data = await call("timeline?" + qs(filters()));
    if (gen !== state.gen) return; // a newer request (another agent, other filters) answers instead
    recovered();
    state.data = data;
    const totals = KINDS.map((k) => `${data.totals[k] || 0} ${NAMES[k]}`).join(" · ");
    $("tl-summary").textContent = data.periods.length
      ? `${data.periods[0].period} to ${data.periods[data.periods.length - 1].period}: ${totals}` : "(nothing yet)";
    draw();
    const keep = data.periods.find((p) => p.period === state.period);
    if (keep) await openPeriod(keep.period); else { state.period = null; $("tl-period-wrap").hidden = true; }
  }

  function draw() {
    const periods = state.data.periods;
    $("tl-legend").replaceChildren(...KINDS.map((k) =>
      el("span", {}, el("span", { class: `swatch k-${k}` }), NAMES[k])));
    const chart = $("tl-chart");
    if (!periods.length) { chart.replaceChildren(el("p", { class: "muted", textContent: "Nothing in this range." })); return; }
    const W = Math.max(320, chart.clientWidth || 1000); // drawn at the size shown: text is never stretched
    const most = Math.max(1, ...periods.map((p) => p.total));
    const slot = (W - LEFT) / periods.length, bar = Math.max(1, Math.min(48, slot * 0.8));
    const scale = (n) => ((H - TOP - BOTTOM) * n) / most;
    const root = svg("svg", { viewBox: `0 0 ${W} ${H}`, width: W, height: H, role: "group",
      "aria-label": `${periods.length} periods, the fullest holds ${most} items` });
    root.append(svg("line", { class: "grid-line", x1: LEFT, x2: W, y1: H - BOTTOM, y2: H - BOTTOM }),
      svg("line", { class: "grid-line", x1: LEFT, x2: W, y1: TOP, y2: TOP }),
      svg("text", { class: "axis", x: LEFT - 6, y: TOP + 10, "text-anchor": "end" }, String(most)),
      svg("text", { class: "axis", x: LEFT - 6, y: H - BOTTOM, "text-anchor": "end" }, "0"));
    const every = Math.ceil(periods.length / Math.max(1, Math.floor((W - LEFT) / 70))); // labels that fit
    periods.forEach((p, i) => {
      const x = LEFT + i * slot + (slot - bar) / 2;
      const words = (p.rising || []).map((t) => t.term).join(", ");
      const title = `${p.period}: ` + KINDS.map((k) => `${p.counts[k] || 0} ${NAMES[k]}`).join(", ")
        + (words ? `\nrising: ${words}` : "");
      const g = svg("g", { class: "bar" + (p.period === state.period ? " selected" : ""), tabindex: "0", role: "button",
        "data-period": p.period, "data-total": String(p.total), "aria-label": title }, svg("title", {}, title),
        svg("rect", { class: "hit", x: LEFT + i * slot, y: TOP, width: slot, height: H - TOP - BOTTOM }));
      let y = H - BOTTOM;
      for (const k of KINDS) {
        const n = p.counts[k] || 0;
        if (!n) continue;
        const h = Math.max(1, scale(n));
        y -= h;
        g.append(svg("rect", { class: `k-${k}`, "data-kind": k, x, y, width: bar, height: h }));
      }
      if (i % every === 0) {
        g.append(svg("text", { class: "axis", x: LEFT + (i + 0.5) * slot, y: H - 6, "text-anchor": "middle" }, p.period));
      }
      const pick = () => openPeriod(p.period).catch((e) => say(e.message));
      g.addEventListener("click", pick);
      g.addEventListener("keydown", (e) => { if (e.key === "Enter" || e.key === " ") { e.preventDefault(); pick(); } });
      root.append(g);
    });
    chart.replaceChildren(root);
  }

  async function openPeriod(key) {
    state.period = key;
    document.querySelectorAll("#tl-chart .bar").forEach((g) =>
      g.classList.toggle("selected", g.dataset.period === key));
    const f = filters();
    const data = await call("timeline/period?" + qs({ agent: f.agent, period: key, q: f.q, from: f.from, to: f.to }));
    if (state.period !== key) return;
    recovered();
    $("tl-period").textContent = key;
    const counts = KINDS.filter((k) => data.counts[k]).map((k) => `${data.counts[k]} ${NAMES[k]}`);
    $("tl-period-counts").textContent = (counts.join(" · ") || "nothing")
      + (data.total > data.shown ? ` (the first ${data.shown} of ${data.total} listed)` : "");
    $("tl-rising").replaceChildren(...(data.rising.length
      ? [el("span", { class: "muted", textContent: "Rising: " }),
        ...data.rising.map((t) => el("span", { class: "term", title: `in ${t.count} items; z ${t.score}`, textContent: t.term }))]
      : [el("span", { class: "muted", textContent: "No word rises in this period." })]));
    $("tl-items").tBodies[0].replaceChildren(...data.items.map((it) => el("tr", { data: { kind: it.kind, id: it.id } },
      el("td", { textContent: it.time.replace("T", " ").slice(0, 16) }),
      el("td", {}, el("span", { class: `swatch k-${it.kind}` }), NAMES[it.kind]),
      el("td", { textContent: it.detail }),
      el("td", { class: "content", textContent: it.text }))));
    $("tl-period-wrap").hidden = false;
  }

  const run = () => load().catch((e) => say(e.message));
  $("tl-form").addEventListener("submit", (e) => { e.preventDefault(); run(); });
  $("tl-by").addEventListener("change", run);
  $("agent").addEventListener("change", () => { state.period = null; run(); });
  // the page is ready (its agent chosen) once app.js marks the body; a new token starts it again
  const ready = () => document.body.dataset.ready === "true";
  new MutationObserver(() => { if (ready()) run(); }).observe(document.body, { attributes: true, attributeFilter: ["data-ready"] });
  if (ready()) run();
})();
