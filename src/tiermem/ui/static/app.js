// tiermem memory inspector: plain JavaScript, no build step, no network beyond this server's /ui/api.
"use strict";
(() => {
  const $ = (id) => document.getElementById(id);
  const PAGE = 50;
  const state = {
    token: null, agent: null, blocks: [], signature: "", pollGen: 0,
    editing: null, // {label, version, original}
    passOffset: 0, passTotal: 0, lastSearch: null,
    folder: null, file: null, // the folder and file shown in the Folders section
  };

  // -- plumbing ---------------------------------------------------------------------------
  function readToken() {
    const m = location.hash.match(/token=([^&]+)/);
    if (m) {
      sessionStorage.setItem("tiermem-token", decodeURIComponent(m[1]));
      history.replaceState(null, "", location.pathname + location.search); // keep the secret out of sight
    }
    state.token = sessionStorage.getItem("tiermem-token");
  }

  async function call(path, opts = {}) {
    const headers = {};
    if (state.token) headers.Authorization = "Bearer " + state.token;
    let body = opts.body;
    if (opts.json !== undefined) { headers["Content-Type"] = "application/json"; body = JSON.stringify(opts.json); }
    const r = await fetch("api/" + path, { method: opts.method || (body === undefined ? "GET" : "POST"), headers, body });
    if (r.status === 401) { $("auth").hidden = false; throw new Error("This server needs a bearer token: paste it above."); }
    if (opts.raw && r.ok) return r;
    const data = await r.json().catch(() => ({ error: r.status + " " + r.statusText }));
    if (!r.ok) throw new Error(data.error || r.statusText);
    return data;
  }

  window.tiermemApi = { call }; // the timeline and links sections (timeline.js, links.js) call the API through it

  const qs = (params) => new URLSearchParams(
    Object.entries(params).filter(([, v]) => v !== undefined && v !== null && v !== "")).toString();
  const sleep = (ms) => new Promise((res) => setTimeout(res, ms));
  const when = (iso) => iso.replace("T", " ").slice(0, 19);

  function say(text, ok = false) {
    const a = $("alert");
    a.textContent = text || "";
    a.className = ok ? "ok" : "";
    a.hidden = !text;
  }

  function el(tag, props = {}, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(props)) {
      if (k === "class") node.className = v;
      else if (k === "on") for (const [ev, fn] of Object.entries(v)) node.addEventListener(ev, fn);
      else if (k === "data") Object.assign(node.dataset, v);
      else if (k === "width") node.style.width = v; // CSSOM: allowed by the page's Content-Security-Policy
      else node[k] = v;
    }
    for (const c of children) if (c !== null && c !== undefined) node.append(c);
    return node;
  }

  async function guarded(fn) {
    try { await fn(); } catch (e) { say(e.message); }
  }

  // -- agents and blocks ------------------------------------------------------------------------
  async function loadAgents() {
    const data = await call("agents");
    const select = $("agent");
    select.replaceChildren(...data.agents.map((a) => el("option", { value: a.name, textContent: a.name })));
    const wanted = new URLSearchParams(location.search).get("agent");
    const names = data.agents.map((a) => a.name);
    state.agent = names.includes(wanted) ? wanted : (names.includes(data.default) ? data.default : names[0] || null);
    if (state.agent) select.value = state.agent;
    else say("No agent is visible with this token.");
  }

  async function refresh() {
    const view = await call("agent?" + qs({ agent: state.agent }));
    state.blocks = view.blocks;
    state.signature = view.signature;
    $("counts").textContent = `${view.blocks.length} blocks · ${view.counts.passages} passages · ${view.counts.messages} messages`;
    renderBlocks();
    if (state.editing) syncEditor();
    if (view.counts.passages !== state.passTotal) await loadPassages();
  }

  function renderBlocks() {
    const filter = $("block-filter").value.trim().toLowerCase();
    const shown = state.blocks.filter((b) => !filter || b.label.includes(filter));
    $("block-count").textContent = `(${state.blocks.length})`;
    $("blocks").replaceChildren(...shown.map((b) => {
      const pct = Math.min(100, Math.round((100 * b.chars) / b.limit));
      const li = el("li", { data: { label: b.label }, class: state.editing && state.editing.label === b.label ? "selected" : "" },
        el("button", { type: "button", on: { click: () => guarded(() => openBlock(b.label)) } },
          el("span", { class: "label", textContent: b.label }),
          b.read_only ? el("span", { class: "badge ro", textContent: "read-only" }) : null,
          b.pinned === false ? el("span", { class: "badge", textContent: "detached",
            title: "not in the prompt every turn: the model sees its label and description and opens it with memory_open" }) : null,
          b.shared_with > 0 ? el("span", { class: "badge", textContent: `shared with ${b.shared_with}` }) : null,
          el("span", { class: "badge", textContent: `v${b.version}` }),
          el("span", { class: "desc", textContent: `${b.chars} / ${b.limit} chars · ${b.description || "no description"}` }),
          el("span", { class: "bar" + (b.chars >= b.limit ? " full" : ""), title: `${pct}% of the limit` },
            el("span", { width: `${pct}%` }))));
      return li;
    }));
  }

  // -- the editor ----------------------------------------------------------------------------------
  const blockOf = (label) => state.blocks.find((b) => b.label === label);

  async function openBlock(label) {
    const b = blockOf(label);
    if (!b) return;
    state.editing = { label, version: b.version, original: b.value };
    $("editor-section").hidden = false;
    $("ed-label").textContent = label;
    $("ed-value").value = b.value;
    $("ed-override").checked = false;
    $("ed-remote").hidden = true;
    $("diff-wrap").hidden = true;
    showMeta(b);
    renderBlocks();
    await loadHistory();
    $("ed-value").focus();
  }

  function showMeta(b) {
    $("ed-desc").textContent = b.description || "(no description)";
    $("ed-meta").textContent = `version ${b.version} · limit ${b.limit} characters · updated ${when(b.updated_at)}` +
      (b.shared_with > 0 ? ` · shared with ${b.shared_with} other agent(s)` : "");
    $("ed-ro").hidden = !b.read_only;
    $("ed-meter").max = b.limit;
    updateCount();
  }

  function dirty() { return state.editing && $("ed-value").value !== state.editing.original; }

  function updateCount() {
    const b = state.editing && blockOf(state.editing.label);
    if (!b) return;
    const n = $("ed-value").value.length;
    $("ed-meter").value = Math.min(n, b.limit);
    const over = n - b.limit;
    const count = $("ed-count");
    count.textContent = over > 0 ? `${n} / ${b.limit} characters: ${over} over the limit, saving will be refused`
      : `${n} / ${b.limit} characters`;
    count.className = over > 0 ? "over" : "";
    $("ed-value").classList.toggle("over", over > 0);
    $("ed-save").disabled = !dirty();
  }

  function syncEditor() {
    const b = blockOf(state.editing.label);
    if (!b) { // detached or renamed elsewhere
      say(`Block ${state.editing.label} is no longer attached to ${state.agent}.`);
      state.editing = null; $("editor-section").hidden = true; return;
    }
    if (b.version === state.editing.version) return;
    if (!dirty()) {
      state.editing = { label: b.label, version: b.version, original: b.value };
      $("ed-value").value = b.value;
      $("ed-remote").hidden = true;
    } else {
      $("ed-remote-text").textContent = `This block changed elsewhere (now version ${b.version}). Your unsaved text is kept; ` +
        "saving it will be refused until you load the new version.";
      $("ed-remote").hidden = false;
    }
    showMeta(b);
    loadHistory().catch((e) => say(e.message));
  }

  async function save() {
    const e = state.editing;
    const data = await call("edit", { json: { agent: state.agent, label: e.label, value: $("ed-value").value,
      expected_version: e.version, override_read_only: $("ed-override").checked } });
    state.editing = { label: e.label, version: data.block.version, original: data.block.value };
    say(data.changed ? `Saved ${e.label} as version ${data.block.version}.` : "No change to save.", true);
    await refresh();
    await loadHistory();
  }

  async function loadHistory() {
    const label = state.editing.label;
    const data = await call("history?" + qs({ agent: state.agent, label, limit: 50 }));
    const newest = data.versions.length ? data.versions[0].version : 0;
    $("history").tBodies[0].replaceChildren(...data.versions.map((v) => el("tr",
      { class: v.version === newest ? "current" : "", data: { version: v.version } },
      el("td", { textContent: v.version }), el("td", { textContent: when(v.created_at) }),
      el("td", { textContent: v.actor }), el("td", { textContent: v.operation }), el("td", { textContent: v.value.length }),
      el("td", {},
        v.version > 1 ? el("button", { type: "button", class: "diff-btn", textContent: "Diff with previous",
          on: { click: () => guarded(() => showDiff(label, v.version - 1, v.version)) } }) : null,
        v.version !== newest ? el("button", { type: "button", class: "diff-current-btn", textContent: "Diff with current",
          on: { click: () => guarded(() => showDiff(label, v.version, newest)) } }) : null,
        v.version !== newest ? el("button", { type: "button", class: "revert-btn", textContent: "Revert to this",
          on: { click: () => guarded(() => revertTo(label, v.version)) } }) : el("span", { class: "muted", textContent: " current" }),
        v.version !== newest ? el("button", { type: "button", class: "forget-btn", textContent: "Forget this version",
          on: { click: () => guarded(() => forgetVersion(label, v.version)) } }) : null))));
  }

  async function forgetVersion(label, version) {
    if (!confirm(`Forget version ${version} of ${label}? Its value is removed from the history and from every file ` +
                 "of the data directory now. This cannot be undone.")) return;
    const data = await call("forget", { json: { agent: state.agent, kind: "block", ref: label, versions: [version], now: true } });
    const held = (data.still_held_outside_the_store || []).map((h) => h.path || h).join(", ");
    const unfinished = data.store_purge_unfinished ? ` ${data.store_purge_unfinished}` : "";
    say(`Forgot version ${version} of ${label}.` + (held ? ` Still held outside the store: ${held}.` : "") + unfinished,
        !unfinished);
    await loadHistory();
  }

  async function showDiff(label, older, newer) {
    const data = await call("diff?" + qs({ agent: state.agent, label, old: older, new: newer }));
    $("diff-title").textContent = `Diff of ${label}: version ${older} → ${newer}`;
    const cls = { "+": "add", "-": "del", "@": "hunk", " ": "" };
    $("diff").replaceChildren(...(data.lines.length ? data.lines.map((l) =>
      el("span", { class: cls[l.kind], textContent: (l.kind === "@" ? "@" : l.kind) + l.text + "\n" }))
      : [el("span", { textContent: "(same value; the change was to the settings)" })]));
    $("diff-wrap").hidden = false;
  }

  async function revertTo(label, version) {
    const b = blockOf(label);
    if (b.read_only && !$("ed-override").checked) {
      say(`${label} is read-only: tick the read-only box first to revert it yourself.`); return;
    }
    if (!confirm(`Restore ${label} to version ${version}? It is saved as a new version; nothing is lost.`)) return;
    const data = await call("revert", { json: { agent: state.agent, label, version, override_read_only: $("ed-override").checked } });
    state.editing = { label, version: data.block.version, original: data.block.value };
    $("ed-value").value = data.block.value;
    say(`Reverted ${label} to version ${version} (now version ${data.block.version}).`, true);
    await refresh();
    await loadHistory();
  }

  // -- live updates: long polls that answer when the agent's signature changes ----------------------
  async function poll(gen) {
    let wait = 0; // the first call answers at once: it shows the connection works
    while (gen === state.pollGen) {
      try {
        const r = await call("changes?" + qs({ agent: state.agent, since: state.signature, wait }));
        wait = 25;
        if (gen !== state.pollGen) return;
        setLive(true);
        if (r.changed) await refresh();
      } catch (e) {
        setLive(false, e.message);
        await sleep(2000);
      }
    }
  }

  function setLive(on, why) {
    $("live").textContent = on ? "live" : "offline: " + (why || "retrying");
    $("live").className = "live" + (on ? "" : " off");
  }

  // -- search and passages ------------------------------------------------------------------------------
  async function search() {
    const memory = $("s-memory").value;
    const roles = [...document.querySelectorAll("input[name=role]:checked")].map((i) => i.value).join(",");
    const params = { agent: state.agent, q: $("s-query").value, memory, limit: $("s-limit").value,
      start: $("s-start").value, end: $("s-end").value };
    if (memory === "archival") Object.assign(params, { tags: $("s-tags").value, tag_mode: $("s-tag-mode").value });
    else params.roles = roles;
    const data = await call("search?" + qs(params));
    state.lastSearch = data;
    $("search-notes").textContent = `${data.hits.length} result(s), ${data.mode} search. ` + data.notes.join(" ");
    $("results").hidden = false;
    $("results").tBodies[0].replaceChildren(...data.hits.map((h) => el("tr", { data: { id: h.id } },
      el("td", { textContent: h.relevance.toFixed(3), title: `score ${h.score}` }), el("td", { textContent: h.vector_rank ?? "–" }),
      el("td", { textContent: h.keyword_rank ?? "–" }), el("td", { textContent: when(h.created_at) }),
      el("td", { textContent: h.role || h.tags.join(", ") }), el("td", { class: "content", textContent: h.content }),
      el("td", {}, data.memory === "archival" ? deleteButton(h.id, h.content) : null))));
  }

  function deleteButton(id, content) {
    return el("button", { type: "button", class: "danger delete-btn", textContent: "Delete",
      on: { click: () => guarded(() => deletePassage(id, content)) } });
  }

  async function deletePassage(id, content) {
    const preview = content.length > 120 ? content.slice(0, 120) + "…" : content;
    if (!confirm(`Delete this archival passage for good?\n\n${preview}`)) return;
    const data = await call("passages/delete", { json: { agent: state.agent, id } });
    say(`Deleted ${data.deleted} passage row(s).`, true);
    document.querySelectorAll(`tr[data-id="${CSS.escape(id)}"]`).forEach((tr) => tr.remove());
    await refresh();
    await loadPassages();
  }

  async function loadPassages() {
    const data = await call("passages?" + qs({ agent: state.agent, offset: state.passOffset, limit: PAGE }));
    state.passTotal = data.total;
    if (data.passages.length === 0 && state.passOffset > 0 && data.total > 0) {
      state.passOffset = Math.max(0, Math.floor((data.total - 1) / PAGE) * PAGE); return loadPassages();
    }
    $("passage-count").textContent = `(${data.total})`;
    $("passages").tBodies[0].replaceChildren(...data.passages.map((p) => el("tr", { data: { id: p.id } },
      el("td", { textContent: when(p.created_at) }), el("td", { textContent: p.tags.join(", ") }),
      el("td", { class: "content", textContent: p.content }),
      el("td", {}, el("span", { class: `badge temp-${p.temperature}`, textContent: p.temperature,
        title: `use score ${p.use_score}` })),
      el("td", {}, deleteButton(p.id, p.content)))));
    await loadUses();
    const pages = Math.max(1, Math.ceil(data.total / PAGE));
    $("p-page").textContent = `page ${Math.floor(state.passOffset / PAGE) + 1} of ${pages}`;
    $("p-prev").disabled = state.passOffset === 0;
    $("p-next").disabled = state.passOffset + PAGE >= data.total;
  }

  async function loadUses() {
    const u = await call("uses?" + qs({ agent: state.agent }));
    const part = (kind, c) => `${kind}: ${c.hot} hot, ${c.warm} warm, ${c.cold} cold`;
    $("use-summary").textContent = `Use (half-life ${u.half_life_days} days) · ` +
      Object.entries(u.counts).filter(([, c]) => c.total > 0).map(([k, c]) => part(k, c)).join(" · ");
  }

  // -- folders and files -----------------------------------------------------------------------------------
  const size = (n) => n >= 1048576 ? `${(n / 1048576).toFixed(1)} MB` : n >= 1024 ? `${(n / 1024).toFixed(1)} KB` : `${n} B`;

  async function loadFolders() {
    const data = await call("folders");
    $("folder-count").textContent = `(${data.folders.length})`;
    $("folders").tBodies[0].replaceChildren(...data.folders.map((f) => el("tr",
      { data: { folder: f.id }, class: f.id === state.folder ? "selected" : "", tabIndex: 0,
        on: { click: () => guarded(() => openFolder(f.id)),
              keydown: (e) => { if (e.key === "Enter") guarded(() => openFolder(f.id)); } } },
      el("td", { class: "name", textContent: f.name }), el("td", { textContent: f.description || "–" }),
      el("td", { class: "count", textContent: f.files }),
      el("td", { textContent: [...f.agents, ...(f.other_agents ? [`${f.other_agents} other(s)`] : [])].join(", ") || "none" }))));
    if (state.folder && !data.folders.some((f) => f.id === state.folder)) {
      state.folder = state.file = null; $("folder-wrap").hidden = $("file-wrap").hidden = true;
    } else if (state.folder) await openFolder(state.folder, false);
  }

  // a folder is opened by its id (a name an older tiermem left to two folders is refused)
  async function openFolder(id, resetFile = true) {
    const data = await call("folders/files?" + qs({ folder: id }));
    state.folder = id;
    if (resetFile) { state.file = null; $("file-wrap").hidden = true; }
    document.querySelectorAll("#folders tbody tr").forEach((tr) => tr.classList.toggle("selected", tr.dataset.folder === id));
    $("folder-name").textContent = data.folder;
    $("folder-wrap").hidden = false;
    $("files").tBodies[0].replaceChildren(...(data.files.length ? data.files.map((f) => el("tr",
      { data: { file: f.name }, class: f.name === state.file ? "selected" : "", tabIndex: 0,
        on: { click: () => guarded(() => openFile(f.name)),
              keydown: (e) => { if (e.key === "Enter") guarded(() => openFile(f.name)); } } },
      el("td", { class: "name", textContent: f.name }), el("td", { textContent: f.file_type }),
      el("td", { textContent: size(f.size), title: `${f.size} bytes` }),
      el("td", {}, el("span", { class: `badge status status-${f.status}`, textContent: f.status })),
      el("td", { textContent: f.chunks }), el("td", { class: "content error", textContent: f.error || "" })))
      : [el("tr", {}, el("td", { colSpan: 6, class: "muted", textContent: "No files in this folder yet." }))]));
    if (state.file && !resetFile) await openFile(state.file);
  }

  // the same checks and texts as `tiermem folders rename`: a refusal is shown and nothing changes
  async function renameFolder() {
    const data = await call("folders/rename", { json: { folder: state.folder, name: $("folder-new-name").value } });
    $("folder-new-name").value = "";
    await loadFolders();
    say(data.renamed ? `Renamed folder ${data.old_name} to ${data.name}.` : `Folder ${data.name} is named so already.`, true);
  }

  async function openFile(name) {
    const data = await call("folders/file?" + qs({ agent: state.agent, folder: state.folder, file: name }));
    state.file = name;
    document.querySelectorAll("#files tbody tr").forEach((tr) => tr.classList.toggle("selected", tr.dataset.file === name));
    $("file-wrap").hidden = false;
    $("file-name").textContent = data.view.name;
    $("file-status").textContent = data.status + (data.error ? `: ${data.error}` : "");
    const v = data.view;
    let text;
    if (!v.attached) text = `Not in ${data.agent}'s files: ` + (data.status === "completed"
      ? "the folder is not attached to this agent." : `the file is not ready (${data.status}).`);
    else if (!v.is_open) text = `closed for ${data.agent}: the model sees only its name until it opens it (open_files).`;
    else {
      const lines = v.start_line ? `lines ${v.start_line}–${v.end_line ?? "end"}` : "from the start";
      const cut = v.visible.length < v.window_chars  // cut at the agent's per-file limit
        ? `, ${v.visible.length} of them visible in its core memory` : ", all visible in its core memory";
      text = `open for ${data.agent}: ${lines}, a window of ${v.window_chars} characters${cut}.`;
    }
    $("file-window").textContent = text;
    $("file-visible").hidden = !(v.is_open && v.visible);
    $("file-visible").textContent = v.is_open ? v.visible : "";
    $("file-chars").textContent = `(${data.chars} characters)`;
    $("file-text").textContent = data.text || "(no text: the file was not parsed)";
  }

  async function searchFiles() {
    const kind = $("fs-kind").value;
    const data = await call("folders/search?" + qs({ agent: state.agent, q: $("fs-query").value, kind,
      include: $("fs-include").value.trim() }));
    $("fs-results").hidden = false;
    for (const tool of ["grep", "semantic"]) {
      const asked = kind === "both" || kind === tool;
      $(`fs-${tool}-wrap`).hidden = !asked;
      $(`fs-${tool}`).textContent = data[tool] ?? data[`${tool}_error`] ?? "";
      $(`fs-${tool}`).classList.toggle("failed", data[tool] === undefined);
    }
    if (state.file) await openFile(state.file); // a search marks the files it found as used
  }

  // -- import and export ----------------------------------------------------------------------------------
  async function download(format) {
    const r = await call("export?" + qs({ agent: state.agent, format }), { raw: true });
    const name = (r.headers.get("content-disposition") || "").match(/filename="([^"]+)"/);
    const url = URL.createObjectURL(await r.blob());
    const a = el("a", { href: url, download: name ? name[1] : "export" });
    document.body.append(a); a.click(); a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 10000);
    say(`Exported ${name ? name[1] : "file"}.`, true);
  }

  async function importFile() {
    const file = $("i-file").files[0];
    if (!file) { say("Choose a file to import."); return; }
    const params = { filename: file.name, format: $("i-format").value, agent: state.agent,
      rename: $("i-rename").value.trim(), replace: $("i-replace").checked ? "true" : "" };
    const data = await call("import?" + qs(params), { method: "POST", body: await file.arrayBuffer() });
    $("i-report").textContent = JSON.stringify(data.report, null, 2);
    $("i-report").hidden = false;
    say(`Imported ${file.name}.`, true);
    const current = state.agent;
    await loadAgents();
    $("agent").value = state.agent = current;
    await refresh();
  }

  async function deleteAgent() {
    const name = state.agent;
    const plan = await call("agents/plan?" + qs({ agent: name }));
    const typed = prompt(`Delete for good?\n\n${plan.summary}\n\nType the agent's name (${name}) to confirm:`);
    if (typed === null) return;
    const data = await call("agents/delete", { json: { agent: name, confirm: typed.trim() } });
    say(`Deleted agent ${data.deleted}: ${data.blocks.length} block(s), ${data.messages} message(s), ${data.passages} passage(s).`, true);
    await loadAgents();
    if (state.agent) await selectAgent(state.agent);
  }

  // -- start ------------------------------------------------------------------------------------------------
  async function selectAgent(name) {
    state.agent = name;
    state.editing = null; state.passOffset = 0; state.passTotal = -1;
    $("editor-section").hidden = true; $("results").hidden = true; $("search-notes").textContent = "";
    await refresh(); // loads the first page of passages too (passTotal is unknown)
    $("fs-results").hidden = true;
    await loadFolders().catch((e) => say(e.message)); // the file shown is shown as this agent sees it
    state.pollGen += 1;
    poll(state.pollGen);
  }

  async function start() {
    readToken();
    $("auth").hidden = true;
    await loadAgents();
    if (state.agent) await selectAgent(state.agent);
    document.body.dataset.ready = "true";
  }

  function wire() {
    $("agent").addEventListener("change", (e) => guarded(() => selectAgent(e.target.value)));
    $("block-filter").addEventListener("input", renderBlocks);
    $("ed-value").addEventListener("input", updateCount);
    $("ed-value").addEventListener("keydown", (e) => {
      if ((e.ctrlKey || e.metaKey) && e.key === "s") { e.preventDefault(); if (dirty()) guarded(save); }
    });
    $("ed-save").addEventListener("click", () => guarded(save));
    $("ed-reset").addEventListener("click", () => { $("ed-value").value = state.editing.original; updateCount(); });
    $("ed-load-remote").addEventListener("click", () => {
      const b = blockOf(state.editing.label);
      state.editing = { label: b.label, version: b.version, original: b.value };
      $("ed-value").value = b.value; $("ed-remote").hidden = true; updateCount();
    });
    $("s-memory").addEventListener("change", () => {
      const recall = $("s-memory").value === "recall";
      document.querySelectorAll(".archival-only").forEach((n) => { n.hidden = recall; });
      document.querySelectorAll(".recall-only").forEach((n) => { n.hidden = !recall; });
    });
    $("search-form").addEventListener("submit", (e) => { e.preventDefault(); guarded(search); });
    $("p-prev").addEventListener("click", () => { state.passOffset = Math.max(0, state.passOffset - PAGE); guarded(loadPassages); });
    $("p-next").addEventListener("click", () => { state.passOffset += PAGE; guarded(loadPassages); });
    $("x-af").addEventListener("click", () => guarded(() => download("af")));
    $("x-jsonl").addEventListener("click", () => guarded(() => download("jsonl")));
    $("import-form").addEventListener("submit", (e) => { e.preventDefault(); guarded(importFile); });
    $("f-reload").addEventListener("click", () => guarded(loadFolders));
    $("folder-rename-form").addEventListener("submit", (e) => { e.preventDefault(); guarded(renameFolder); });
    $("fs-form").addEventListener("submit", (e) => { e.preventDefault(); guarded(searchFiles); });
    $("a-delete").addEventListener("click", () => guarded(deleteAgent));
    $("auth").addEventListener("submit", (e) => {
      e.preventDefault();
      sessionStorage.setItem("tiermem-token", $("auth-token").value.trim());
      guarded(start);
    });
  }

  wire();
  window.addEventListener("hashchange", () => { if (/token=/.test(location.hash)) guarded(start); }); // a new link
  guarded(start);
})();
