// ragline operator console. No framework, no build step: DOM built with createElement and
// textContent only (never innerHTML), so document text can never become markup.
"use strict";

(function () {
  const KEY = "ragline.console.key";
  const API = new URL("../", document.baseURI); // /console/ -> the server root (or proxy prefix)
  let principals = [];
  const ROLES = "ragline.console.roles";
  // Which pages each role may use: a tenant admin its tenant, an operator the index.
  const PAGE_ROLES = { search: "admin", explain: "admin", upload: "admin", jobs: "admin", keys: "admin", index: "operator" };
  function roles() { return (sessionStorage.getItem(ROLES) || "").split(",").filter(Boolean); }
  function allowed(page) { return roles().includes(PAGE_ROLES[page]); }
  let jobsTimer = null;

  // --- helpers ---------------------------------------------------------------------------
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "class") node.className = v;
      else if (k === "text") node.textContent = v;
      else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
      else node.setAttribute(k, v === true ? "" : String(v));
    }
    for (const c of children.flat(Infinity)) {
      if (c === null || c === undefined) continue;
      node.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return node;
  }
  const $ = (id) => document.getElementById(id);
  function clear(node, ...children) { node.replaceChildren(...children.flat(Infinity).filter((c) => c != null)); }
  const fmt = (n, d = 3) => (n === null || n === undefined ? "" : Number(n).toFixed(d));
  const when = (iso) => (iso ? new Date(iso).toLocaleString() : "");
  function table(caption, headers, rows, cls) {
    return el("div", { class: "scroll" },
      el("table", { class: cls || "" },
        caption ? el("caption", { text: caption }) : null,
        el("thead", {}, el("tr", {}, headers.map((h) => el("th", { scope: "col", text: h })))),
        el("tbody", {}, rows)));
  }
  const td = (...c) => el("td", {}, ...c);
  function list(text) { return text.split(",").map((s) => s.trim()).filter(Boolean); }

  class ApiError extends Error {
    constructor(status, code, message) { super(message); this.status = status; this.code = code; }
  }

  // A FormData body goes as multipart (the browser writes its boundary); anything else as JSON.
  async function api(method, path, body) {
    const headers = { Authorization: "Bearer " + sessionStorage.getItem(KEY) };
    const form = body instanceof FormData;
    if (body !== undefined && !form) headers["Content-Type"] = "application/json";
    const res = await fetch(new URL(path, API), {
      method, headers, body: body === undefined ? undefined : form ? body : JSON.stringify(body),
      credentials: "omit", cache: "no-store",
    });
    const data = await res.json().catch(() => ({}));
    if (!res.ok) {
      const e = data.error || {};
      if (res.status === 401) signOut("Signed out: " + (e.message || "the key was refused"));
      throw new ApiError(res.status, e.code || "error", e.message || res.statusText);
    }
    return data;
  }

  function showError(id, err) { $(id).textContent = err ? (err.message || String(err)) : ""; }

  // --- sign-in and routing ---------------------------------------------------------------
  async function signIn(key) {
    sessionStorage.setItem(KEY, key);
    try {
      const me = await api("GET", "v1/me");
      if (!me.roles.includes("admin") && !me.roles.includes("operator"))
        throw new ApiError(403, "forbidden", "this key is neither a tenant admin nor an operator key");
      sessionStorage.setItem(ROLES, me.roles.join(","));
      principals = allowed("keys") ? await api("GET", "v1/admin/principals") : [];
    } catch (err) {
      sessionStorage.removeItem(KEY);
      sessionStorage.removeItem(ROLES);
      throw err;
    }
    fillPrincipals();
  }

  function signOut(message) {
    sessionStorage.removeItem(KEY);
    sessionStorage.removeItem(ROLES);
    stopJobs();
    stopUploads();
    $("nav").hidden = true;
    $("who").hidden = true;
    showPage("signin");
    $("signin-error").textContent = message || "";
  }

  function fillPrincipals() {
    clear($("principal-list"), principals.map((p) => el("option", { value: p.principal_id })));
  }

  const PAGES = ["signin", "search", "explain", "upload", "jobs", "index", "keys"];
  function showPage(name) {
    for (const p of PAGES) $("page-" + p).hidden = p !== name;
    for (const a of document.querySelectorAll("#nav a")) {
      if (a.dataset.page === name) a.setAttribute("aria-current", "page");
      else a.removeAttribute("aria-current");
    }
    document.body.dataset.page = name;
  }

  function route() {
    if (!sessionStorage.getItem(KEY)) { showPage("signin"); return; }
    $("nav").hidden = false;
    $("who").hidden = false;
    const held = roles().filter((r) => r === "admin" || r === "operator");
    $("who-text").textContent = "signed in with an " + (held.join(" and ") || "admin") + " key";
    for (const a of document.querySelectorAll("#nav a")) a.hidden = !allowed(a.dataset.page);
    $("k-operator").hidden = !allowed("index");
    const first = PAGES.find((p) => p !== "signin" && allowed(p)) || "search";
    const name = (location.hash || "#" + first).slice(1);
    const page = PAGES.includes(name) && name !== "signin" && allowed(name) ? name : first;
    showPage(page);
    stopJobs();
    if (page !== "upload") stopUploads();
    if (page === "jobs") startJobs();
    if (page === "upload" && uploads.length) startUploads();
    if (page === "index") loadIndex().catch((e) => showError("index-error", e));
    if (page === "keys") loadKeys().catch((e) => showError("keys-error", e));
  }

  // --- search playground -----------------------------------------------------------------
  function groupsOf(id) {
    const p = principals.find((x) => x.principal_id === id);
    return p ? p.groups : null;
  }
  function showGroups() {
    const id = $("as-principal").value.trim();
    const groups = groupsOf(id);
    $("as-groups").textContent = !id ? "searching as the admin key's principal"
      : groups === null ? "not a known principal of this tenant (no groups)"
      : "groups: " + (groups.join(", ") || "none");
  }

  // "team=sre, year=2025" -> {team: "sre", year: "2025"}
  function metadataOf(text) {
    const meta = {};
    for (const pair of list(text || "")) {
      const [k, ...v] = pair.split("=");
      if (k && v.length) meta[k.trim()] = v.join("=").trim();
    }
    return meta;
  }

  function searchBody(form) {
    const f = new FormData(form);
    const meta = metadataOf(f.get("metadata"));
    const body = {
      query: f.get("query"), mode: f.get("mode"), top_k: Number(f.get("top_k")),
      max_context_tokens: Number(f.get("max_context_tokens")),
      filters: { source: list(f.get("source") || ""), mime_type: list(f.get("mime_type") || ""), metadata: meta },
    };
    const as = (f.get("as_principal") || "").trim();
    if (as) body.as_principal = as;
    if (f.get("rerank")) body.rerank = f.get("rerank") === "true";
    return body;
  }

  function rankCell(r, stage) {
    const rank = r.ranks[stage];
    const score = r.stage_scores[stage];
    if (rank === undefined && score === undefined) return td("–");
    return td(rank !== undefined ? "#" + rank : "", score !== undefined ? el("span", { class: "score", text: " " + fmt(score) }) : null);
  }

  function renderContext(ctx) {
    const box = el("div", { class: "context", id: "context-text" });
    let at = 0;
    const cites = [...ctx.citations].sort((a, b) => a.start - b.start);
    for (const c of cites) {
      if (c.start > at) box.append(ctx.text.slice(at, c.start));
      const label = "[" + c.results.join(",") + "]";
      box.append(el("mark", { class: "cite", "data-results": c.results.join(","), title: "cites result " + label },
        ctx.text.slice(c.start, c.end), el("sup", { text: label })));
      at = Math.max(at, c.end);
    }
    if (at < ctx.text.length) box.append(ctx.text.slice(at));
    return el("div", {},
      el("h3", { text: "Packed context" }),
      el("p", { class: "hint", text: ctx.token_count + " tokens" + (ctx.truncated ? ", truncated" : "") +
        (ctx.notes.length ? " · " + ctx.notes.join("; ") : "") }),
      box);
  }

  function renderSearch(out, as) {
    const p = out.principal;
    const head = el("dl", { class: "facts" },
      el("dt", { text: "Principal" }), el("dd", { id: "result-principal", text: p.principal_id + (p.known ? "" : " (unknown)") }),
      el("dt", { text: "Groups" }), el("dd", { id: "result-groups", text: p.groups.join(", ") || "none" }),
      el("dt", { text: "Index version" }), el("dd", { id: "result-version", text: out.index_version }),
      el("dt", { text: "Model" }), el("dd", { text: out.model }),
      el("dt", { text: "Fusion" }), el("dd", { id: "result-fusion", text: fusionText(out.fusion) }),
      el("dt", { text: "Degraded" }), el("dd", { text: out.degraded.map((d) => d.stage + ": " + d.reason).join("; ") || "none" }));
    const rows = out.results.map((r) =>
      el("tr", { "data-external-id": r.document_external_id, "data-chunk-id": r.chunk_id },
        td("#" + r.rank), td(el("strong", { text: r.document_external_id }), el("br"), el("small", { text: r.title || "" })),
        td(fmt(r.score, 4)), rankCell(r, "dense"), rankCell(r, "lexical"), rankCell(r, "fused"), rankCell(r, "rerank"),
        td(r.found_by.join(" + ")), td(el("div", { class: "snippet", text: r.text })), judgeCell(out, r, as)));
    const results = out.results.length
      ? table("Results", ["Rank", "Document", "Score", "Dense", "Lexical", "Fused", "Rerank", "Found by", "Text", "Judge"], rows, "results")
      : el("p", { id: "no-results", text: "No results for this principal." });
    const plans = out.plans.length
      ? table("Planner strategy per shard", ["Shard", "Strategy", "Allowed"],
        out.plans.map((x) => el("tr", {}, td(x.shard), td(x.strategy), td(x.allowed))), "plans")
      : el("p", { id: "plans-hint", class: "hint", text: noPlans(out) });
    const timings = table("Timings (ms)", Object.keys(out.timings_ms),
      [el("tr", {}, Object.values(out.timings_ms).map((v) => td(fmt(v, 1))))]);
    clear($("search-out"), head, results, renderContext(out.context), el("div", { class: "row" }, plans, timings));
  }

  function fusionText(f) {
    if (!f) return "none (one leg)";
    return f.method + (f.method === "rrf" ? " k=" + f.rrf_k : "") + " · weights dense " + f.weights.dense +
      ", lexical " + f.weights.lexical + " · candidates " + f.candidates.dense + " / " + f.candidates.lexical;
  }

  // Relevance feedback on a result, as the principal the search was made as (their judgement,
  // checked against what they may read), for this answer's request id.
  function judgeCell(out, r, as) {
    const cell = el("td", { class: "judge" });
    const send = async (label) => {
      const body = { request_id: out.request_id, chunk_id: r.chunk_id, label };
      if (as) body.as_principal = as;
      try {
        await api("POST", "v1/feedback", body);
        clear(cell, el("span", { class: "ok", "data-judged": label, text: label === "relevant" ? "judged relevant" : "judged not relevant" }));
      } catch (e) { showError("search-error", e); }
    };
    cell.append(
      el("button", { type: "button", "data-judge": "relevant", title: "relevant to this query", onclick: () => send("relevant"), text: "Relevant" }),
      el("button", { type: "button", "data-judge": "not_relevant", title: "not relevant to this query", onclick: () => send("not_relevant"), text: "Not relevant" }));
    return cell;
  }

  // --- tenant fusion defaults ------------------------------------------------------------
  async function loadFusion() {
    const f = await api("GET", "v1/admin/fusion");
    const stored = f.tenant ? Object.entries(f.tenant).map(([k, v]) => k + "=" + v).join(", ") : "none stored";
    clear($("fusion-now"), el("dl", { class: "facts" },
      el("dt", { text: "In effect" }), el("dd", { id: "fusion-effective", text: fusionText(f.effective) }),
      el("dt", { text: "Stored for the tenant" }), el("dd", { id: "fusion-stored", text: stored }),
      el("dt", { text: "Server settings" }), el("dd", { text: fusionText(f.settings) })));
  }
  function fusionBody(form) {
    const num = (name) => (form[name].value === "" ? undefined : Number(form[name].value));
    const body = {};
    if (form.method.value) body.method = form.method.value;
    if (num("rrf_k") !== undefined) body.rrf_k = num("rrf_k");
    const weights = { dense: num("w_dense"), lexical: num("w_lexical") };
    const candidates = { dense: num("c_dense"), lexical: num("c_lexical") };
    const given = (o) => Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined));
    if (Object.keys(given(weights)).length) body.weights = given(weights);
    if (Object.keys(given(candidates)).length) body.candidates = given(candidates);
    return body;
  }
  async function resetFusion() {
    if (!window.confirm("Drop this tenant's ranking defaults? Its retrieves use the server's settings again.")) return;
    try { await api("DELETE", "v1/admin/fusion"); showError("fusion-error", null); await loadFusion(); }
    catch (e) { showError("fusion-error", e); }
  }

  // Why no shard shows a plan: say the one reason that holds, not a list of guesses.
  function noPlans(out) {
    if (out.index_version === "delta-only") return "No dense shard was searched: no index version yet (the delta answered).";
    if (!out.results.length) return "No results: nothing this principal may read matched, so no shard was searched.";
    return "No dense shard was searched (lexical mode, or only the delta held readable chunks).";
  }

  // --- why not? --------------------------------------------------------------------------
  const REASONS = {
    not_found: "no such document in this tenant",
    deleted: "the document is deleted",
    superseded: "this chunk belongs to an older version of the document",
    not_in_acl: "the principal is not in the document's ACL",
    filtered: "the request filters exclude it",
    not_embedded: "some chunks have no vector for the serving model yet",
    no_chunks: "the document has no searchable chunks",
    in_delta: "written after the index version was built: served from the delta",
    below_top_k: "visible, but not among the first results for this query",
  };
  function renderExplain(x) {
    const verdict = x.visible
      ? (x.rank ? "Returned at rank " + x.rank : "Visible to " + x.principal.principal_id)
      : "Hidden from " + x.principal.principal_id;
    const facts = [
      ["Principal groups", x.principal.groups.join(", ") || "none"],
      ["Groups that would grant it", x.granting_groups.join(", ") || (x.public ? "public document" : "none")],
      ["Principals in the ACL", x.granting_principals.join(", ") || "none"],
      ["Filtered by", x.filtered_by.join(", ") || "–"],
      ["Document state", x.document_state || "–"],
      ["Current version", x.current_version ?? "–"],
      ["Superseded by version", x.superseded_by ?? "–"],
      ["Chunks (indexed / delta)", x.chunks + " (" + x.indexed_chunks + " / " + x.delta_chunks + ")"],
      ["Index version", x.index_version],
    ];
    clear($("explain-out"),
      el("p", { id: "explain-verdict", class: x.visible ? "ok verdict" : "bad verdict", text: verdict }),
      el("ul", { id: "explain-reasons" }, x.reasons.map((r) =>
        el("li", { "data-reason": r }, el("code", { text: r }), " – " + (REASONS[r] || r) +
          (r === "superseded" && x.superseded_by ? " (now version " + x.superseded_by + ")" : "")))),
      el("dl", { class: "facts" }, facts.map(([k, v]) => [el("dt", { text: k }), el("dd", { text: String(v) })])));
  }

  // --- upload ----------------------------------------------------------------------------
  // Each file is one POST /v1/documents:upload (the server settles its type from the content
  // and the name); the row then follows its job until the document is indexed or failed, with
  // the job's reason code for that document (an encrypted or corrupt file fails there, not at
  // the upload).
  let uploads = [];
  let uploadsTimer = null;
  const FINAL = ["succeeded", "failed", "partially_failed", "cancelled"];

  function uploadAcl(form) {
    const readers = list(form.readers.value);
    if (!readers.length && !form.public.checked)
      throw new ApiError(400, "no_readers", "Name the readers or tick Public: a document nobody may read is never found.");
    return { principals: readers, public: form.public.checked };
  }

  async function uploadOne(row, acl, meta) {
    const body = new FormData();
    body.append("file", row.file, row.file.name);
    body.append("external_id", row.id);
    body.append("metadata", JSON.stringify(meta));
    body.append("acl", JSON.stringify(acl));
    try {
      const out = await api("POST", "v1/documents:upload", body);
      Object.assign(row, { outcome: "queued", job: out.job_id, message: "queued in job " + out.job_id.slice(0, 8) });
    } catch (e) {
      Object.assign(row, { outcome: "refused", code: e.code, message: e.message });
    }
    renderUploads();
  }

  async function followUploads() {
    const open = [...new Set(uploads.filter((u) => u.outcome === "queued" || u.outcome === "running").map((u) => u.job))];
    for (const id of open) {
      const j = await api("GET", "v1/jobs/" + id);
      for (const u of uploads.filter((x) => x.job === id)) {
        const err = j.errors.find((e) => e.external_id === u.id);
        if (err) Object.assign(u, { outcome: "failed", code: err.code || "", message: err.message || "" });
        else if (j.state === "cancelled") Object.assign(u, { outcome: "cancelled", message: "the job was cancelled" });
        else if (FINAL.includes(j.state)) {
          // Indexed, with what the job noted for it (an e-mail's skipped attachments, OCR pages...)
          const noted = (j.warnings || []).filter((w) => w.external_id === u.id).flatMap((w) => w.warnings);
          Object.assign(u, { outcome: "indexed", message: noted.length ? "searchable; " + noted.join("; ") : "searchable" });
        }
        else if (j.state === "running") Object.assign(u, { outcome: "running", message: "parsing and embedding" });
      }
    }
    renderUploads();
    if (!uploads.some((u) => u.outcome === "queued" || u.outcome === "running")) stopUploads();
  }
  function startUploads() {
    stopUploads();
    const tick = () => followUploads().then(() => showError("upload-error", null)).catch((e) => showError("upload-error", e));
    uploadsTimer = setInterval(tick, 1000);
    tick();
  }
  function stopUploads() { if (uploadsTimer) clearInterval(uploadsTimer); uploadsTimer = null; }

  function renderUploads() {
    const rows = uploads.map((u) => el("tr", { "data-file": u.file.name, "data-external-id": u.id, "data-outcome": u.outcome, "data-code": u.code || "" },
      td(u.file.name), td(el("code", { text: u.id })), td(Math.ceil(u.file.size / 1024) + " KiB"),
      td(el("span", { class: "state " + ({ indexed: "succeeded", refused: "failed" }[u.outcome] || u.outcome), text: u.outcome })),
      td(u.code ? el("code", { text: u.code }) : ""), td(u.message || "")));
    clear($("upload-out"), rows.length ? table("Uploads", ["File", "Document id", "Size", "Outcome", "Reason code", "Detail"], rows, "uploads") : null);
  }

  async function upload(form) {
    const acl = uploadAcl(form);
    const meta = metadataOf(form.metadata.value);
    const prefix = form.prefix.value.trim();
    uploads = [...form.files.files].map((file) => ({ file, id: prefix + file.name, outcome: "uploading", message: "" }));
    renderUploads();
    for (const row of uploads) await uploadOne(row, acl, meta);  // one at a time: the server's limits are per key
    form.files.value = "";
    startUploads();
  }

  // --- jobs ------------------------------------------------------------------------------
  function eta(job) {
    const left = job.documents.total - job.documents.done;
    const rate = job.throughput.documents_per_s;
    if (job.cancel_requested || !["running", "queued"].includes(job.state) || left <= 0) return "";
    if (job.state === "running" && job.documents.done === 0) return "estimating…";
    return rate > 0 ? Math.ceil(left / rate) + " s" : "…";
  }
  // What the state badge says: a running job whose cancel the API accepted is "cancelling".
  function shownState(j) { return j.state === "running" && j.cancel_requested ? "cancelling" : j.state; }
  // The bar counts items written (succeeded or unchanged), so a failed job never looks
  // complete; a running job with nothing processed yet (a Ray job starting its actors, or its
  // first batch in flight) gets an indeterminate bar instead of a misleading 0. The words are
  // the API's own (`progress`, services.jobs.progress_line), as the CLI prints them.
  function progressCell(j) {
    const d = j.documents, ok = d.done - d.failed;
    const label = "progress of job " + j.job_id.slice(0, 8);
    const bar = j.state === "running" && d.done === 0
      ? el("progress", { "aria-label": label, "data-indeterminate": "true" })
      : el("progress", { max: Math.max(d.total, 1), value: ok, "aria-label": label });
    return td(bar, " " + j.progress);
  }
  // A model migration counts chunks: its rate is chunks per second.
  function rateCell(j) {
    return td(fmt(j.throughput.documents_per_s, 2) + (j.unit === "chunks" ? " chunks/s" : " docs/s"));
  }
  async function loadJobs() {
    const jobs = await api("GET", "v1/jobs?limit=50");
    const rows = jobs.map((j) => {
      const d = j.documents;
      const actions = el("td", {});
      if (["queued", "running"].includes(j.state) && !j.cancel_requested)
        actions.append(el("button", { type: "button", "data-action": "cancel", onclick: () => jobAction(j.job_id, "cancel"), text: "Cancel" }));
      if (j.resumable)  // only where the API would resume it: a failed job with nothing left to run is not
        actions.append(el("button", { type: "button", "data-action": "resume", onclick: () => jobAction(j.job_id, "resume"), text: "Resume" }));
      actions.append(el("button", { type: "button", "data-action": "details", onclick: () => jobDetail(j.job_id), text: "Details" }));
      const state = shownState(j);
      return el("tr", { "data-job-id": j.job_id, "data-state": state },
        td(el("code", { text: j.job_id.slice(0, 8) })), td(j.kind), td(el("span", { class: "state " + state, text: state })),
        progressCell(j),
        td(d.failed), rateCell(j), td(eta(j)), td(when(j.created_at)), actions);
    });
    clear($("jobs-out"), rows.length
      ? table(null, ["Job", "Kind", "State", "Progress", "Failed", "Rate", "ETA", "Created", "Actions"], rows, "jobs")
      : el("p", { text: "No jobs yet." }));
  }
  // An action's outcome stays on the page until the next action (the 1 s refresh clears only
  // its own errors), so a refused resume or cancel is seen, with the server's reason.
  async function jobAction(id, action) {
    try {
      await api("POST", "v1/jobs/" + id + ":" + action);
      showError("jobs-action-error", null);
      await loadJobs();
    } catch (e) {
      showError("jobs-action-error", e ? Object.assign(e, { message: action + " " + id.slice(0, 8) + ": " + e.message }) : e);
    }
  }
  async function jobDetail(id) {
    try {
      const j = await api("GET", "v1/jobs/" + id);
      clear($("job-detail"), el("h3", { text: "Job " + id }),
        el("p", { text: j.state + " · " + j.progress + " · " + j.chunks + " chunks · " + j.pages + " pages · " + fmt(j.throughput.seconds, 1) + " s" }),
        j.errors.length
          ? table("Per-item errors", ["Item", "Document", "Reason code", "Message"],
            j.errors.map((e) => el("tr", {}, td(e.item_no), td(e.external_id), td(el("code", { text: e.code || "" })), td(e.message || ""))))
          : el("p", { text: "No item errors." }));
    } catch (e) { showError("jobs-error", e); }
  }
  function startJobs() {
    const tick = () => loadJobs().then(() => showError("jobs-error", null)).catch((e) => showError("jobs-error", e));
    tick();
    jobsTimer = setInterval(tick, 1000);
  }
  function stopJobs() { if (jobsTimer) clearInterval(jobsTimer); jobsTimer = null; }

  // --- index -----------------------------------------------------------------------------
  async function loadIndex() {
    const ix = await api("GET", "v1/admin/index");
    const s = ix.serving;
    clear($("index-serving"), s
      ? el("p", { id: "serving" }, "This node serves ", el("strong", { id: "serving-version", text: s.version_id }), " (" + s.model + ")",
        s.last_swap_error ? el("span", { class: "error", text: " · last refused swap: " + s.last_swap_error }) : null)
      : el("p", { text: "No search service on this node." }));
    const ready = ix.versions.filter((v) => v.state === "ready");
    clear($("index-aliases"), table(null, ["Alias", "Version", "Previous (rollback target)", "Swap to", ""],
      ix.aliases.map((a) => {
        const sel = el("select", { "aria-label": "version for alias " + a.alias, id: "swap-select-" + a.alias },
          ready.map((v) => el("option", { value: v.version_id, selected: v.version_id === a.version_id, text: v.version_id })));
        return el("tr", { "data-alias": a.alias },
          td(a.alias), td(el("code", { text: a.version_id })), td(a.previous_version || "–"),
          td(sel, el("button", { type: "button", id: "swap-" + a.alias, onclick: () => swap(a.alias, sel.value), text: "Swap" })),
          td(el("button", { type: "button", id: "rollback-" + a.alias, disabled: !a.previous_version,
            onclick: () => rollback(a.alias, a.previous_version), text: "Roll back" })));
      })));
    clear($("index-versions"), table(null,
      ["Version", "State", "Aliases", "Model", "Kinds", "Shards", "Chunks", "Hidden", "Delta", "Position", "Built", "Build s", "Migration gate", ""],
      ix.versions.map((v) => el("tr", { "data-version": v.version_id },
        td(el("code", { text: v.version_id })), td(v.state), td([...v.aliases, ...v.rollback_of.map((a) => "(" + a + " rollback)")].join(" ")),
        td(v.model + " · " + v.dim + "d"), td(v.kinds.join(", ")), td(v.shards), td(v.chunks),
        td(v.hidden + " (" + fmt(v.hidden_fraction * 100, 1) + "%)"), td(v.delta), td(v.position), td(when(v.built_at)),
        td(fmt(v.build_seconds, 1)),
        td(gateReport(v.gate)),
        td(v.state === "ready" ? el("button", { type: "button", onclick: () => quality(v.version_id), text: "Check quality" }) : "")))));
  }
  // A model migration's gate results on its target version: the verdict, then every check.
  function gateReport(gate) {
    if (!gate) return "–";
    return el("details", { class: "gate" },
      el("summary", { text: gate.passed ? "passed" : "failed" }),
      el("pre", { text: JSON.stringify(gate, null, 2) }));
  }

  async function swap(alias, version) {
    if (!window.confirm("Point alias " + alias + " at " + version + "? Searches switch to it at once.")) return;
    try { await api("POST", "v1/admin/index/aliases/" + alias + ":swap", { version_id: version }); showError("index-error", null); }
    catch (e) { showError("index-error", e); }
    await loadIndex();
  }
  async function rollback(alias, previous) {
    if (!window.confirm("Roll alias " + alias + " back to " + previous + "?")) return;
    try { await api("POST", "v1/admin/index/aliases/" + alias + ":rollback"); showError("index-error", null); }
    catch (e) { showError("index-error", e); }
    await loadIndex();
  }
  async function quality(version) {
    clear($("index-quality"), el("p", { text: "Checking " + version + "…" }));
    try {
      const q = await api("POST", "v1/admin/index/versions/" + version + ":quality");
      clear($("index-quality"), table("recall@" + q.k + " of " + version + " (ANN vs exact, min " + fmt(q.min_recall) + ")",
        ["Shard", "Kind", "Vectors", "Sampled", "Recall"],
        q.shards.map((s) => el("tr", {}, td(s.shard), td(s.kind), td(s.vectors), td(s.sampled), td(s.recall === null ? "empty" : fmt(s.recall)))),
        "quality"));
    } catch (e) { clear($("index-quality")); showError("index-error", e); }
  }
  async function gc() {
    if (!window.confirm("Delete every index version no alias uses, past the grace period?")) return;
    try {
      const r = await api("POST", "v1/admin/index:gc");
      clear($("index-gc"), el("p", { text: "Deleted: " + (r.deleted.join(", ") || "nothing") + " (grace " + r.grace_seconds + " s)" }),
        el("ul", {}, r.kept.map((k) => el("li", { text: "kept " + k.version_id + ": " + k.reason }))));
      await loadIndex();
    } catch (e) { showError("index-error", e); }
  }

  // --- keys and principals ---------------------------------------------------------------
  async function loadKeys() {
    const [keys, ps] = await Promise.all([api("GET", "v1/admin/keys"), api("GET", "v1/admin/principals")]);
    principals = ps;
    fillPrincipals();
    clear($("keys-out"), table(null, ["Key id", "Principal", "Roles", "Delegate", "State", "Name", "Created", "Last used", ""],
      keys.map((k) => el("tr", { "data-key-id": k.key_id },
        td(el("code", { text: k.key_id })), td(k.principal_id), td(k.roles.join(", ")), td(k.can_delegate ? "yes" : "no"),
        td(k.state), td(k.name || ""), td(when(k.created_at)), td(when(k.last_used_at)),
        td(k.state === "active" ? el("button", { type: "button", onclick: () => revokeKey(k.key_id), text: "Revoke" }) : "")))));
    clear($("principals-out"), table(null, ["Principal", "Groups", "Active keys"],
      ps.map((p) => el("tr", {}, td(p.principal_id), td(p.groups.join(", ") || "none"), td(p.active_keys)))));
  }
  async function revokeKey(id) {
    if (!window.confirm("Revoke key " + id + "? Clients using it are refused within a second.")) return;
    try { await api("POST", "v1/admin/keys/" + id + ":revoke"); await loadKeys(); } catch (e) { showError("keys-error", e); }
  }

  // --- wiring ----------------------------------------------------------------------------
  function onSubmit(id, errId, handler) {
    $(id).addEventListener("submit", async (ev) => {
      ev.preventDefault();
      const button = ev.target.querySelector("button[type=submit]");
      button.disabled = true;
      try { showError(errId, null); await handler(ev.target); } catch (e) { showError(errId, e); }
      finally { button.disabled = false; }
    });
  }

  document.addEventListener("DOMContentLoaded", () => {
    onSubmit("signin-form", "signin-error", async (form) => {
      await signIn(form.key.value.trim());
      form.reset();
      if (!location.hash || location.hash === "#signin") location.hash = "#search";
      route();
    });
    onSubmit("search-form", "search-error", async (form) => {
      clear($("search-out"), el("p", { text: "Searching…" }));
      const body = searchBody(form);
      try { renderSearch(await api("POST", "v1/admin/retrieve", body), body.as_principal); }
      catch (e) { clear($("search-out")); throw e; }
    });
    onSubmit("explain-form", "explain-error", async (form) => {
      const f = new FormData(form);
      const body = { as_principal: f.get("as_principal").trim() };
      for (const k of ["external_id", "chunk_id", "query"]) if ((f.get(k) || "").trim()) body[k] = f.get(k).trim();
      clear($("explain-out"));
      renderExplain(await api("POST", "v1/admin/explain", body));
    });
    onSubmit("upload-form", "upload-error", upload);
    onSubmit("fusion-form", "fusion-error", async (form) => {
      await api("PUT", "v1/admin/fusion", fusionBody(form));
      form.reset();
      await loadFusion();
    });
    $("fusion-reset").addEventListener("click", resetFusion);
    $("fusion-box").addEventListener("toggle", () => {
      if ($("fusion-box").open) loadFusion().catch((e) => showError("fusion-error", e));
    });
    onSubmit("key-form", "keys-error", async (form) => {
      const f = new FormData(form);
      const body = { roles: f.getAll("roles"), can_delegate: form.can_delegate.checked };
      if ((f.get("principal_id") || "").trim()) body.principal_id = f.get("principal_id").trim();
      if ((f.get("name") || "").trim()) body.name = f.get("name").trim();
      const made = await api("POST", "v1/admin/keys", body);
      clear($("key-created"), el("p", { class: "ok" }, "Key ", el("code", { text: made.key.key_id }),
        " created. Copy the token now; it is not shown again: "),
        el("output", { id: "new-token", class: "token", text: made.token }));
      form.reset();
      await loadKeys();
    });
    onSubmit("groups-form", "keys-error", async (form) => {
      const id = form.principal.value.trim();
      await api("PUT", "v1/principals/" + encodeURIComponent(id) + "/groups", { groups: list(form.groups.value) });
      form.reset();
      await loadKeys();
    });
    $("as-principal").addEventListener("input", showGroups);
    $("gc-button").addEventListener("click", gc);
    $("sign-out").addEventListener("click", () => signOut("Signed out."));
    window.addEventListener("hashchange", route);
    if (sessionStorage.getItem(KEY) && allowed("keys")) {
      api("GET", "v1/admin/principals").then((ps) => { principals = ps; fillPrincipals(); showGroups(); }).catch(() => {});
    }
    showGroups();
    route();
  });
})();
