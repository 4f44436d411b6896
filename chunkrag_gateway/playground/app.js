// The chunkrag playground. Everything shown comes from the gateway's public API
// (POST /{index}/_search with ext.chunkrag and include_dropped, a plain _search for
// neighbours, GET /v1/playground/indices), so it is exactly what any client gets.
// A chunk index (chunkrag ingest wrote it) shows its candidate chunks; any other index
// runs in post-search mode: the caller's own _search body, each hit with its kept passages.
// Rules kept throughout: credentials live in `state.auth` only (never storage, cookies
// or the URL; fetch sends no cookies and never lets the browser prompt); text from
// the index or the model is set with textContent, never parsed as HTML.
"use strict";

(function () {
  const ROOT = location.pathname.replace(/\/v1\/playground\/?$/, "");
  // The filter's defaults (retrieval modes, candidates, the fixed cut, the judge's nine), written
  // in by the gateway when it serves this file, from the options' one declaration
  // (search_extension/options.py): the page holds no second copy of them.
  const DEFAULTS = {/* the gateway writes the filter's defaults here */};
  const MODES = ["", ...DEFAULTS.modes];
  const PRESETS = {
    filter: "default filter (retrieval signals, no model call)",
    topk: "plain hybrid top-k (no filter)",
    judge: "LLM judge on (judge_top " + DEFAULTS.judge_top + ")",
  };
  // The stage scores in pipeline order (chunk.stage_scores' keys), and the labels they get.
  const SCORE_ORDER = ["bm25", "knn", "cosine", "relevance", "base", "forward", "reverse", "reflection", "critic",
    "prior", "calibrated", "combined", "rerank"];
  const SCORE_LABELS = {
    relevance: "relevance model", base: "judge share", forward: "judge (order 1)", reverse: "judge (order 2)",
  };
  const DEFAULT_THRESHOLD = DEFAULTS.fixed_threshold;
  const SVG = "http://www.w3.org/2000/svg";

  // Looked for in a hit's _source to head it when the index list names no title field (text_fields.py).
  const TITLE_NAMES = ["title", "name", "subject", "headline"];

  const state = {
    auth: null, scheme: "none", results: {}, requests: {}, copyFormat: "body",
    // index -> {kind: "chunks" | "existing" | "unknown", fields, title}, from the index list.
    described: {},
    // Whether the post-search body was written by hand (then the page no longer rewrites it).
    bodyEdited: false,
  };

  // --- small DOM helpers: strings always become text nodes --------------------------

  function $(id) { return document.getElementById(id); }

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (key === "class") node.className = value;
      else if (key === "text") node.textContent = value;
      else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
      else if (key === "dataset") Object.assign(node.dataset, value);
      else node.setAttribute(key, value === true ? "" : String(value));
    }
    for (const child of children.flat()) {
      if (child === null || child === undefined || child === false) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  function svg(tag, attrs, ...children) {
    const node = document.createElementNS(SVG, tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (key === "text") node.textContent = value;
      else if (key === "class") node.setAttribute("class", value);
      else node.setAttribute(key, String(value));
    }
    for (const child of children.flat()) if (child) node.append(child);
    return node;
  }

  function clear(node) { node.replaceChildren(); return node; }
  function fmt(value, digits = 3) {
    return typeof value === "number" && isFinite(value) ? value.toFixed(digits) : "–";
  }

  // --- the API --------------------------------------------------------------------

  class ApiError extends Error {
    constructor(status, message) { super(message); this.status = status; }
  }

  async function api(method, path, body) {
    const headers = { Accept: "application/json" };
    if (body !== undefined) headers["Content-Type"] = "application/json";
    if (state.auth) headers.Authorization = state.auth;
    let response;
    try {
      response = await fetch(ROOT + path, {
        method, headers, body: body === undefined ? undefined : JSON.stringify(body),
        credentials: "omit", cache: "no-store", referrerPolicy: "no-referrer",
      });
    } catch (exc) {
      throw new ApiError(0, "the gateway did not answer (" + exc.message + ")");
    }
    let data = null;
    try { data = await response.json(); } catch (exc) { data = null; }
    if (!response.ok) throw new ApiError(response.status, describeError(response.status, data));
    return data;
  }

  function describeError(status, data) {
    const error = data && data.error;
    const reason = error && (error.reason || (error.root_cause && error.root_cause[0] && error.root_cause[0].reason));
    return status + " " + (error && error.type ? error.type + ": " : "") + (reason || "no details");
  }

  function indexPath(index, endpoint) { return "/" + encodeURIComponent(index) + "/" + endpoint; }

  // --- sign in ----------------------------------------------------------------------

  function base64(text) {
    const bytes = new TextEncoder().encode(text);
    let binary = "";
    for (const byte of bytes) binary += String.fromCharCode(byte);
    return btoa(binary);
  }

  function showScheme() {
    const scheme = $("auth-scheme").value;
    $("basic-fields").hidden = scheme !== "basic";
    $("apikey-fields").hidden = scheme !== "apikey";
  }

  async function signIn(event) {
    event.preventDefault();
    const scheme = $("auth-scheme").value;
    let auth = null, who = "no credentials";
    if (scheme === "basic") {
      auth = "Basic " + base64($("auth-user").value + ":" + $("auth-password").value);
      who = "user " + $("auth-user").value;
    } else if (scheme === "apikey") {
      auth = "ApiKey " + $("auth-key").value.trim();
      who = "an API key";
    }
    $("auth-password").value = "";
    $("auth-key").value = "";
    state.auth = auth;
    state.scheme = scheme;
    $("login-error").textContent = "";
    try {
      const listed = await api("GET", "/v1/playground/indices");
      fillIndices(listed.indices || [], listed.described || {});
    } catch (exc) {
      state.auth = null;
      $("login-error").textContent = "Sign-in failed: " + exc.message;
      return;
    }
    $("who").textContent = "signed in with " + who;
    $("login").hidden = true;
    $("workspace").hidden = false;
    $("sign-out").hidden = false;
    $("question").focus();
  }

  function signOut() {
    state.auth = null;
    state.results = {};
    state.requests = {};
    $("who").textContent = "";
    $("sign-out").hidden = true;
    $("workspace").hidden = true;
    $("login").hidden = false;
    for (const id of ["result", "hits-result", "comparison", "copy", "queryset-result"]) $(id).hidden = true;
  }

  const KINDS = {
    chunks: ["Chunk indices (chunkrag ingest)", "chunk index"],
    existing: ["Your indices (post-search)", "post-search"],
    unknown: ["Not described (decided at search time)", "not described"],
  };

  function fillIndices(names, described) {
    state.described = described;
    const select = clear($("index"));
    for (const [kind, [group, label]] of Object.entries(KINDS)) {
      const members = names.filter((name) => kindOf(name) === kind);
      if (!members.length) continue;
      select.append(el("optgroup", { label: group }, members.map((name) =>
        el("option", { value: name, dataset: { kind }, text: name + " · " + label }))));
    }
    if (!names.length) select.append(el("option", { value: "", text: "(no index you may read)" }));
    indexChanged();
  }

  function kindOf(index) { return (state.described[index] || {}).kind || "unknown"; }

  // The picked index decides the view: a chunk index's candidates, or post-search over your own body.
  function indexChanged() {
    const index = $("index").value, about = state.described[index] || {}, kind = kindOf(index);
    const badge = $("index-kind");
    badge.className = "kind " + kind;
    badge.dataset.kind = kind;
    badge.textContent = kind === "chunks" ? "chunk index: its chunks are retrieved and filtered"
      : kind === "existing" ? "your index: post-search over the hits of your own body"
        : index ? "not described" + (about.reason ? " (" + about.reason + ")" : "") + ": the gateway decides" : "";
    const existing = kind === "existing";
    $("post-search").hidden = !existing;
    $("post-search-fields").textContent = existing
      ? (about.fields.length ? "text fields: " + about.fields.join(", ") : "no text field found") +
        (about.title ? "; title: " + about.title : "") + leftOut(about.left_out) +
        (about.problem ? "; " + about.problem : "")
      : "";
    // Candidates and the retrieval mode are a chunk index's; so are side by side and query sets here.
    for (const name of ["candidates", "mode"]) $("setting-a-" + name).disabled = existing;
    $("settings-b").disabled = existing;
    chunkIndexOnly(existing);
    $("ask").textContent = existing ? "Search with A" : "Ask with A";
    state.bodyEdited = false;
    fillBody();
  }

  // The text fields post-search passed over (framework metadata, ids, URLs), each with why.
  function leftOut(fields) {
    const entries = Object.entries(fields || {});
    return entries.length ? "; not read: " + entries.map(([name, why]) => name + " (" + why + ")").join(", ") : "";
  }

  // Side by side and query sets compare chunk retrievals: off for an index of your own.
  function chunkIndexOnly(existing) {
    for (const id of ["compare", "queryset-run"]) {
      if (existing) $(id).disabled = true;
      $(id).title = existing ? "chunk indices only" : "";
    }
  }

  // --- settings panels ----------------------------------------------------------------

  function buildSettings(fieldset, preset, answer) {
    const side = fieldset.dataset.side;
    const id = (name) => "setting-" + side.toLowerCase() + "-" + name;
    const presetSelect = el("select", { id: id("preset") },
      Object.entries(PRESETS).map(([value, label]) => el("option", { value, text: label })));
    presetSelect.value = preset;
    const modeSelect = el("select", { id: id("mode") },
      MODES.map((mode) => el("option", { value: mode, text: mode || "gateway default" })));
    const method = el("select", { id: id("threshold") },
      ["fixed", "dynamic", "relative"].map((m) => el("option", { value: m, text: m })));
    // The project's relevance model: scoring the candidates (crossencoder), ordering the kept (local).
    const relevance = el("select", { id: id("relevance") },
      DEFAULTS.relevance.map((r) => el("option", { value: r, text: r })));
    relevance.value = DEFAULTS.relevance_default;
    const rerank = el("select", { id: id("rerank") },
      DEFAULTS.reranks.map((r) => el("option", { value: r, text: r })));
    rerank.value = DEFAULTS.rerank_default;
    // Whether anything retrieved is relevant at all: below the gate nothing is kept, no model is called.
    const gate = el("select", { id: id("gate") },
      DEFAULTS.gates.map((g) => el("option", { value: g, text: g })));
    gate.value = DEFAULTS.gate_default;
    fieldset.append(
      el("label", {}, "Filter ", presetSelect),
      el("label", {}, "Candidates ", el("input", {
        id: id("candidates"), type: "number", min: 1, max: DEFAULTS.max_candidates, value: DEFAULTS.candidates,
      })),
      el("label", {}, "Retrieval ", modeSelect),
      el("label", {}, "Threshold ", method),
      el("label", {}, "Relevance ", relevance),
      el("label", {}, "Rerank ", rerank),
      el("label", {}, "Gate ", gate),
      el("label", {}, "Cut ",
        el("input", {
          id: id("cut"), type: "number", min: 0, max: 1, step: 0.05,
          value: DEFAULT_THRESHOLD, placeholder: "calibrated",
        })),
      el("label", {}, el("input", { id: id("answer"), type: "checkbox", checked: answer }), " answer"),
    );
    const toggle = () => {
      const plain = presetSelect.value === "topk";
      for (const name of ["threshold", "cut", "answer", "relevance", "rerank", "gate"]) $(id(name)).disabled = plain;
    };
    presetSelect.addEventListener("change", toggle);
    toggle();
  }

  // The ext.chunkrag options of one side; only what differs from the gateway's defaults,
  // so the copied body is the shortest that does the same.
  function optionsOf(side, { answer } = {}) {
    const get = (name) => $("setting-" + side.toLowerCase() + "-" + name);
    const asked = parseInt(get("candidates").value, 10) || DEFAULTS.candidates;
    const options = { candidates: Math.max(1, Math.min(DEFAULTS.max_candidates, asked)) };
    if (get("mode").value) options.mode = get("mode").value;
    if (get("preset").value === "topk") {
      options.stages = false;
    } else {
      if (get("preset").value === "judge") options.judge_top = DEFAULTS.judge_top;
      if (get("threshold").value !== "fixed") options.threshold = get("threshold").value;
      const cut = parseFloat(get("cut").value);
      if (isFinite(cut) && cut !== DEFAULT_THRESHOLD) options.fixed_threshold = cut;
      Object.assign(options, modelOptions(get));
      options.answer = answer === undefined ? get("answer").checked : answer;
    }
    options.include_dropped = true;
    return options;
  }

  // The relevance model's options of one side, when they differ from the defaults.
  function modelOptions(get) {
    const options = {};
    if (get("relevance").value !== DEFAULTS.relevance_default) options.relevance = get("relevance").value;
    if (get("rerank").value !== DEFAULTS.rerank_default) options.rerank = get("rerank").value;
    if (get("gate").value !== DEFAULTS.gate_default) options.gate = get("gate").value;
    return options;
  }

  function searchBody(question, options) {
    return { query: { match: { text: question } }, size: options.candidates, ext: { chunkrag: options } };
  }

  // --- post-search: your own body on your own index ----------------------------------

  // A multi_match of the question over the index's text fields and title (what `chunkrag search`
  // sends for an index of your own); the size is the cluster's default page.
  function defaultBody(index, question) {
    const about = state.described[index] || {};
    const fields = (about.fields || []).concat(about.title && !(about.fields || []).includes(about.title)
      ? [about.title] : []);
    const match = { query: question };
    if (fields.length) match.fields = fields;
    return { query: { multi_match: match }, size: 10 };
  }

  function fillBody() {
    if (state.bodyEdited || kindOf($("index").value) !== "existing") return;
    $("body-editor").value = JSON.stringify(defaultBody($("index").value, $("question").value.trim()), null, 2);
  }

  // ext.chunkrag for post-search: setting A's filter, and only what differs from the defaults.
  function postSearchOptions() {
    const get = (name) => $("setting-a-" + name);
    const options = { mode: "post_search" };
    if (get("preset").value === "topk") {
      options.stages = false;
    } else {
      if (get("preset").value === "judge") options.judge_top = DEFAULTS.judge_top;
      if (get("threshold").value !== "fixed") options.threshold = get("threshold").value;
      const cut = parseFloat(get("cut").value);
      if (isFinite(cut) && cut !== DEFAULT_THRESHOLD) options.fixed_threshold = cut;
      Object.assign(options, modelOptions(get));
      options.answer = get("answer").checked;
    }
    if ($("ps-include-dropped").checked) options.include_dropped = true;
    if ($("ps-empty-hits").value !== DEFAULTS.empty_hits_default) options.empty_hits = $("ps-empty-hits").value;
    const cap = parseInt($("ps-max-passages").value, 10);
    if (isFinite(cap) && cap !== DEFAULTS.max_passages) options.max_passages = cap;
    return options;
  }

  // The body in the editor with ext.chunkrag added: the page's settings over the body's own options.
  function postSearchBody() {
    fillBody();
    let body;
    try { body = JSON.parse($("body-editor").value); } catch (exc) {
      throw new ApiError(0, "the search body is not JSON: " + exc.message);
    }
    if (!body || typeof body !== "object" || Array.isArray(body)) throw new ApiError(0, "the search body must be an object");
    const ext = body.ext && typeof body.ext === "object" ? body.ext : {};
    const own = ext.chunkrag && typeof ext.chunkrag === "object" ? ext.chunkrag : {};
    return { ...body, ext: { ...ext, chunkrag: { ...own, ...postSearchOptions() } } };
  }

  function postSearch() {
    return busy("searching", async () => {
      const index = $("index").value;
      if (!index) throw new ApiError(0, "pick an index first");
      if (!state.bodyEdited && !$("question").value.trim()) throw new ApiError(0, "type a question first");
      const body = postSearchBody();
      const response = await api("POST", indexPath(index, "_search"), body);
      const result = { index, body, response, candidates: [] };
      state.results = { A: result };
      state.requests = { A: result };
      showHits(result);
      showCopy();
    });
  }

  function sourceValue(source, path) {
    let node = source;
    for (const part of path.split(".")) node = node && typeof node === "object" ? node[part] : undefined;
    if (node === undefined && source && path in source) node = source[path];
    const first = Array.isArray(node) ? node[0] : node;
    return typeof first === "string" ? first : "";
  }

  function hitTitle(hit, index) {
    const source = hit._source || {}, named = (state.described[index] || {}).title;
    for (const path of named ? [named] : TITLE_NAMES) {
      const value = sourceValue(source, path);
      if (value) return value;
    }
    return "";
  }

  function passageItem(passage) {
    const kept = passage.kept !== false;
    const scores = Object.entries(passage.scores || {}).map(([k, v]) => (SCORE_LABELS[k] || k) + " " + fmt(v));
    return el("li", { class: "passage " + (kept ? "kept" : "dropped"),
      dataset: { field: passage.field, start: passage.start, end: passage.end, kept: String(kept),
        reason: passage.reason || "" } },
    el("div", { class: "where muted" },
      el("b", { text: kept ? "kept" : "dropped: " + String(passage.reason || "").replace(/_/g, " ") }),
      " · " + passage.field + " · characters " + passage.start + "–" + passage.end + " · score " +
      fmt(passage.score) + (scores.length ? " (" + scores.join(", ") + ")" : "")),
    el("div", { class: "text", text: passage.text }));
  }

  function showHits(result) {
    const { response, index } = result;
    const section = response.chunkrag || {}, counts = section.hits || {}, passages = section.passages || {};
    const hits = (response.hits && response.hits.hits) || [];
    const total = response.hits && response.hits.total;
    $("result").hidden = true;
    $("comparison").hidden = true;
    $("hits-result").hidden = false;
    $("hits-title").textContent = "post-search · " + index;
    const threshold = section.threshold;
    const fact = (label, value, id) => el("span", { class: "fact", id }, el("b", { text: label }), " ", value);
    const summary = clear($("hits-summary"));
    summary.append(...[
      fact("hits", hits.length + (total && typeof total === "object"
        ? " shown of " + total.value + (total.relation === "gte" ? "+" : "") : ""), "fact-hits"),
      fact("passages kept", (passages.kept ?? 0) + " of " + (passages.candidates ?? 0), "fact-passages"),
      fact("without a kept passage", String(counts.without_kept_passage ?? 0) +
        (counts.empty_hits === "drop" ? " (" + (counts.dropped ?? 0) + " left out)" : " (kept, marked)"),
      "fact-empty"),
      counts.without_text ? fact("without text", String(counts.without_text), "fact-no-text") : null,
      passages.capped ? fact("capped", passages.capped + " over " + passages.max_per_hit + " per hit") : null,
      // Each hit is filtered on its own: a cut computed from a hit's scores is that hit's.
      fact("threshold", threshold ? (threshold.value === null ? "each hit's own" : fmt(threshold.value)) + " (" +
        threshold.method + ")" : "none (no filter)", "fact-threshold"),
      section.relevance_by ? fact("relevance model", relevanceWhere(section), "fact-relevance") : null,
      section.nothing_relevant ? fact("nothing relevant", section.nothing_relevant_reason || "yes",
        "fact-nothing-relevant") : null,
      fact("cluster took", String(response.took ?? "–") + " ms"),
      ...Object.entries(section.fields || {}).map(([name, chosen]) => fact("fields of " + name,
        (chosen.read.length ? chosen.read.join(", ") : "none") + " (" + chosen.chosen_by + ")" +
        leftOut(chosen.left_out), "fact-fields-" + name)),
    ].filter(Boolean));
    const usage = section.usage || {};
    summary.append(el("div", { class: "timings" },
      "timings (ms): ", Object.entries(section.timings_ms || {}).map(([k, v]) => k + " " + fmt(v, 1)).join(" · "),
      " — model calls ", String(usage.model_calls ?? 0), " (cached ", String(usage.cached_calls ?? 0), ")"));
    showHitsAnswer(section.answer);
    const list = clear($("hits-list"));
    hits.forEach((hit, i) => {
      const marker = hit._chunkrag || {};
      const kept = marker.passages || [], dropped = marker.dropped || [];
      const kind = marker.reason === "no_text" ? "no-text" : marker.kept ? "kept" : "empty";
      const title = hitTitle(hit, index);
      list.append(el("article", { class: "hit " + kind,
        dataset: { index: hit._index, id: hit._id, ref: hit._index + "/" + hit._id, kept: String(!!marker.kept) } },
      el("div", { class: "hit-head" },
        el("span", { class: "muted", text: "#" + (i + 1) }),
        el("span", { class: "title", text: title || "(no title)" }),
        el("span", { class: "where muted", text: hit._index + "/" + hit._id }),
        el("span", { class: "where muted", text: "score " + fmt(hit._score) }),
        el("span", { class: "badge " + (marker.kept ? "kept" : ""), text: marker.kept
          ? kept.length + " kept passage" + (kept.length === 1 ? "" : "s")
          : marker.reason === "no_text" ? "no text" : "no kept passage" }),
        marker.capped ? el("span", { class: "badge", text: marker.capped + " over the cap, not judged" }) : null,
        marker.not_prose ? el("span", { class: "badge muted", text: "not prose: " +
          Object.entries(marker.not_prose).map(([name, why]) => name + " (" + why + ")").join(", ") }) : null),
      kept.length || dropped.length
        ? el("ol", { class: "passages" }, kept.map(passageItem), dropped.map(passageItem)) : null));
    });
    if (!hits.length) list.append(el("p", { class: "muted", text: "no hit" }));
    const aggregations = response.aggregations;
    $("aggregations").hidden = !aggregations;
    $("aggregations-text").textContent = aggregations ? JSON.stringify(aggregations, null, 2) : "";
  }

  function showHitsAnswer(answer) {
    const box = clear($("hits-answer"));
    box.hidden = !answer;
    if (!answer) return;
    box.append(el("h3", { text: answer.found ? "Answer" : "Answer (not found in the kept passages)" }),
      el("p", { id: "hits-answer-text", text: answer.text }));
    if ((answer.citations || []).length) {
      box.append(el("p", {}, "Cites: ", answer.citations.map((ref) =>
        el("button", { type: "button", class: "link citation", dataset: { ref }, onclick: () => focusHit(ref),
          text: ref }))));
    }
    if ((answer.passages || []).length) {
      box.append(el("ul", { class: "muted where cited-passages" }, answer.passages.map((p) =>
        el("li", { text: p._index + "/" + p._id + " · " + p.field + " · characters " + p.start + "–" + p.end }))));
    }
  }

  function focusHit(ref) {
    for (const card of $("hits-list").querySelectorAll("article.hit")) {
      const match = card.dataset.ref === ref;
      card.classList.toggle("focus", match);
      if (match) card.scrollIntoView({ block: "center" });
    }
  }

  // --- one search, as candidates in retrieval order -----------------------------------

  function candidatesOf(response) {
    const section = response.chunkrag || {};
    const all = (response.hits.hits || []).concat(section.dropped || []).map((hit) => ({
      id: hit._id,
      source: hit._source || {},
      rank: hit._chunkrag.retrieval_rank,
      retrievalScore: hit._chunkrag.retrieval_score,
      scores: hit._chunkrag.scores || {},
      kept: hit._chunkrag.kept,
      reason: hit._chunkrag.reason,
      score: hit._score,
    }));
    all.sort((a, b) => (a.rank ?? 1e9) - (b.rank ?? 1e9));
    return all;
  }

  function charsOf(candidates) {
    return candidates.reduce((total, c) => total + (c.source.text || "").length, 0);
  }

  async function runSearch(side, question, options) {
    const index = $("index").value;
    if (!index) throw new ApiError(0, "pick an index first");
    const body = searchBody(question, options);
    const response = await api("POST", indexPath(index, "_search"), body);
    const postSearched = (response.chunkrag || {}).mode === "post_search";
    return { index, body, response, candidates: postSearched ? [] : candidatesOf(response) };
  }

  function header(source) {
    const parts = [source.title].concat(source.section || []).filter((part) => part);
    return parts.join(" > ") || source.doc_id || "";
  }

  function position(source) {
    return source.doc_id + " #" + source.position + " (characters " + source.start + "–" + source.end + ")";
  }

  // --- the candidates view ------------------------------------------------------------

  // Where the relevance model scored, and why not on the workers when it fell back.
  function relevanceWhere(section) {
    return "on the " + section.relevance_by +
      (section.relevance_by_reason ? " (" + section.relevance_by_reason + ")" : "");
  }

  function showResult(side, result) {
    const section = result.response.chunkrag || {};
    const candidates = result.candidates;
    const kept = candidates.filter((c) => c.kept);
    const threshold = section.threshold;
    $("result").hidden = false;
    $("result").dataset.threshold = threshold ? String(threshold.value) : "";
    $("result-title").textContent = "setting " + side + " · " + result.index;

    const summary = clear($("summary"));
    const item = (label, value, id) => el("span", { class: "fact", id }, el("b", { text: label }), " ", value);
    summary.append(...[
      item("kept", kept.length + " of " + candidates.length, "fact-kept"),
      item("characters kept", charsOf(kept) + " of " + charsOf(candidates)),
      item("threshold", threshold ? fmt(threshold.value) + " (" + threshold.method + ")"
        : section.gate && !section.gate.passed ? "none (the gate kept nothing)" : "none (no filter)",
        "fact-threshold"),
      item("retrieval", (section.retrieval && section.retrieval.mode) || "–"),
      section.relevance_by ? item("relevance model", relevanceWhere(section), "fact-relevance") : null,
      section.nothing_relevant ? item("nothing relevant", section.nothing_relevant_reason || "yes",
        "fact-nothing-relevant") : null,
      section.gate ? item("gate", section.gate.gate + ": P(relevant) " + fmt(section.gate.probability) +
        (section.gate.passed ? " ≥ " : " < ") + fmt(section.gate.cut), "fact-gate") : null,
      section.query && section.query.rewritten ? item("rewritten", section.query.rewritten) : null,
    ].filter(Boolean));
    const usage = section.usage || {};
    summary.append(el("div", { class: "timings" },
      "timings (ms): ", Object.entries(section.timings_ms || {}).map(([k, v]) => k + " " + fmt(v, 1)).join(" · "),
      " — model calls ", String(usage.model_calls ?? 0), " (cached ", String(usage.cached_calls ?? 0), "), tokens ",
      String(usage.prompt_tokens ?? 0), " in, ", String(usage.completion_tokens ?? 0), " out"));

    drawScores($("chart"), candidates, threshold, !!section.stages);
    showAnswer(section.answer, kept);
    fillCandidates(candidates, !!section.stages);
    $("neighbours").hidden = true;
  }

  function finalScore(candidate, stages) {
    return stages ? candidate.scores.combined ?? candidate.score : candidate.retrievalScore;
  }

  function drawScores(container, candidates, threshold, stages) {
    clear(container);
    const width = Math.max(320, 48 * candidates.length + 60), height = 170, left = 40, top = 12, bottom = 30;
    const values = candidates.map((c) => finalScore(c, stages) || 0);
    const top_ = Math.max(1, ...values, threshold ? threshold.value : 0);
    const y = (v) => top + (height - top - bottom) * (1 - v / top_);
    const chart = svg("svg", { viewBox: `0 0 ${width} ${height}`, width, height, role: "img",
      "aria-label": "final score of each candidate in retrieval order, with the threshold" });
    chart.append(svg("line", { x1: left, x2: width - 10, y1: y(0), y2: y(0), class: "axis" }));
    for (const tick of [0, 0.5, 1]) {
      chart.append(svg("text", { x: left - 6, y: y(tick) + 4, class: "tick", "text-anchor": "end",
        text: tick.toFixed(1) }));
    }
    candidates.forEach((c, i) => {
      const x = left + 8 + i * 48, value = values[i];
      const bar = svg("rect", { x, y: y(value), width: 32, height: Math.max(1, y(0) - y(value)),
        class: "bar " + (c.kept ? "kept" : "dropped") });
      const decision = (c.kept ? "kept" : "dropped") + ", " + c.reason;
      bar.append(svg("title", { text: c.id + ": " + fmt(value) + " — " + decision }));
      chart.append(bar, svg("text", { x: x + 16, y: height - 12, class: "tick", "text-anchor": "middle",
        text: String(c.rank ?? "") }));
    });
    if (threshold && typeof threshold.value === "number") {
      chart.append(
        svg("line", { x1: left, x2: width - 10, y1: y(threshold.value), y2: y(threshold.value), class: "threshold" }),
        svg("text", { x: width - 12, y: y(threshold.value) - 4, class: "tick", "text-anchor": "end",
          text: "threshold " + fmt(threshold.value) }),
      );
    }
    container.append(chart, el("div", { class: "legend muted" },
      el("span", { class: "swatch kept" }), " kept ", el("span", { class: "swatch dropped" }), " dropped · ",
      stages ? "combined score" : "retrieval score", " by retrieval rank"));
  }

  function showAnswer(answer, kept) {
    const box = clear($("answer"));
    if (!answer) { box.hidden = true; return; }
    box.hidden = false;
    box.append(el("h3", { text: answer.found ? "Answer" : "Answer (not found in the kept chunks)" }),
      el("p", { id: "answer-text", text: answer.text }));
    if (answer.citations && answer.citations.length) {
      const numbers = new Map(kept.map((c, i) => [c.id, i + 1]));
      box.append(el("p", {}, "Cites: ", answer.citations.map((id) =>
        el("button", { type: "button", class: "link citation", dataset: { chunk: id },
          onclick: () => focusChunk(id), text: "[" + (numbers.get(id) ?? "?") + "] " + id }))));
    }
  }

  function focusChunk(id) {
    for (const row of $("candidates").querySelectorAll("tr[data-id]")) {
      const match = row.dataset.id === id;
      row.classList.toggle("focus", match);
      if (match) row.scrollIntoView({ block: "center" });
    }
  }

  function scoreKeys(candidates) {
    const keys = new Set();
    for (const c of candidates) for (const key of Object.keys(c.scores)) keys.add(key);
    const ordered = SCORE_ORDER.filter((key) => keys.has(key));
    return ordered.concat([...keys].filter((key) => !SCORE_ORDER.includes(key)).sort());
  }

  function fillCandidates(candidates, stages) {
    const table = clear($("candidates"));
    const keys = scoreKeys(candidates);
    table.append(el("thead", {}, el("tr", {},
      el("th", { text: "rank" }), el("th", { text: "chunk" }),
      keys.map((k) => el("th", { class: "num", title: k, dataset: { score: k }, text: SCORE_LABELS[k] || k })),
      el("th", { text: "decision" }))));
    const body = el("tbody");
    for (const c of candidates) {
      body.append(el("tr", {
        class: c.kept ? "kept" : "dropped",
        dataset: { id: c.id, kept: String(c.kept), reason: c.reason },
        title: "click: its neighbours in the document",
        onclick: () => showNeighbours(c, candidates),
      },
      el("td", { class: "num", text: String(c.rank ?? "") }),
      el("td", { class: "chunk" },
        el("div", { class: "head", text: header(c.source) }),
        el("div", { class: "where muted", text: c.id + " · " + position(c.source) }),
        el("div", { class: "text", text: c.source.text || "" })),
      keys.map((k) => el("td", { class: "num", text: fmt(c.scores[k]) })),
      el("td", { class: "decision" }, el("b", { text: c.kept ? "kept" : "dropped" }), el("br"),
        el("span", { class: "reason", text: c.reason.replace(/_/g, " ") }))));
    }
    table.append(body);
    if (!stages) {
      table.append(el("caption", { class: "muted", text: "no filter: every candidate is kept in retrieval order" }));
    }
  }

  // --- neighbours: the chunks around one (a plain, pass-through _search), and the segment relevant
  // segment extraction would take it into (the same search with segments on) ----------------------

  async function showNeighbours(candidate, candidates) {
    const box = clear($("neighbours"));
    delete box.dataset.loaded;
    box.hidden = false;
    const source = candidate.source, reach = 2, asked = state.results.A;
    box.append(el("h3", { text: "Around " + candidate.id + " in " + source.doc_id +
      " (positions " + Math.max(0, source.position - reach) + "–" + (source.position + reach) + ")" }),
    el("p", { class: "muted", text: "Its neighbours in the document, and the segment relevant segment extraction " +
      "would extend it to (the same search with segments on); the decisions are this search's." }));
    const filter = [{ term: { doc_id: source.doc_id } },
      { range: { position: { gte: source.position - reach, lte: source.position + reach } } }];
    if (typeof source.scale === "number") filter.push({ term: { scale: source.scale } });
    const options = { ...asked.body.ext.chunkrag, segments: true, include_dropped: false };
    if (options.stages !== false) options.answer = false;
    const [around, segmented] = await Promise.allSettled([
      api("POST", indexPath(asked.index, "_search"), {
        query: { bool: { filter } }, sort: [{ position: "asc" }], size: 2 * reach + 1,
        _source: { excludes: ["vector"] },
      }),
      api("POST", indexPath(asked.index, "_search"), { ...asked.body, ext: { chunkrag: options } }),
    ]);
    let members = new Set();
    if (segmented.status === "fulfilled") {
      const segment = segmented.value.hits.hits.find((hit) => (hit._chunkrag.chunk_ids || []).includes(candidate.id));
      members = new Set(segment ? segment._chunkrag.chunk_ids : []);
      box.append(el("p", { id: "segment", dataset: { segment: segment ? segment._id : "" }, text: segment
        ? "In segment " + segment._id + ": " + segment._chunkrag.chunk_ids.length + " chunk(s), characters " +
          segment._source.start + "–" + segment._source.end + ", value " + fmt(segment._score)
        : "In no segment: relevant segment extraction would not take this chunk." }));
    } else {
      box.append(el("p", { class: "error", text: "Segment: " + segmented.reason.message }));
    }
    if (around.status === "fulfilled") {
      const decided = new Map(candidates.map((c) => [c.id, c]));
      const list = el("ol", { class: "neighbour-list" });
      for (const hit of around.value.hits.hits) {
        const other = decided.get(hit._id);
        const label = hit._id === candidate.id ? "this chunk" : other
          ? (other.kept ? "kept" : "dropped: " + other.reason.replace(/_/g, " ")) : "not retrieved";
        const kind = hit._id === candidate.id ? "self" : other ? (other.kept ? "kept" : "dropped") : "";
        list.append(el("li", { class: kind + (members.has(hit._id) ? " in-segment" : ""), dataset: { id: hit._id } },
          el("div", { class: "where muted", text: "#" + hit._source.position + " · " + label +
            (members.has(hit._id) ? " · in the segment" : "") }),
          el("div", { class: "text", text: hit._source.text || "" })));
      }
      box.append(list);
    } else {
      box.append(el("p", { class: "error", text: "Neighbours: " + around.reason.message }));
    }
    box.dataset.loaded = "true";
    box.scrollIntoView({ block: "nearest" });
  }

  // --- ask and compare ----------------------------------------------------------------

  async function busy(label, work) {
    $("error").textContent = "";
    $("status").textContent = label + "…";
    document.body.dataset.busy = "true";
    for (const id of ["ask", "compare", "queryset-run"]) $(id).disabled = true;
    try {
      await work();
      $("status").textContent = "";
    } catch (exc) {
      $("status").textContent = "";
      $("error").textContent = exc.message;
    } finally {
      for (const id of ["ask", "compare", "queryset-run"]) $(id).disabled = false;
      chunkIndexOnly(kindOf($("index").value) === "existing");
      // What a test (or a script) waits on: one more request round finished.
      document.body.dataset.runs = String(Number(document.body.dataset.runs || 0) + 1);
      document.body.dataset.busy = "false";
    }
  }

  function question() {
    const text = $("question").value.trim();
    if (!text) throw new ApiError(0, "type a question first");
    return text;
  }

  function ask() {
    if (kindOf($("index").value) === "existing") return postSearch();
    return busy("asking", async () => {
      const result = await runSearch("A", question(), optionsOf("A"));
      state.results = { A: result };
      state.requests = { A: result };
      if ((result.response.chunkrag || {}).mode === "post_search") {  // an index the list did not describe
        showHits(result);
      } else {
        $("hits-result").hidden = true;
        showResult("A", result);
        $("comparison").hidden = true;
      }
      showCopy();
    });
  }

  function compare() {
    return busy("comparing", async () => {
      const text = question();
      const a = await runSearch("A", text, optionsOf("A"));
      const b = await runSearch("B", text, optionsOf("B"));
      state.results = { A: a, B: b };
      state.requests = { A: a, B: b };
      $("hits-result").hidden = true;
      showResult("A", a);
      showComparison(a, b);
      showCopy();
    });
  }

  function showComparison(a, b) {
    $("comparison").hidden = false;
    const byId = (result) => new Map(result.candidates.map((c) => [c.id, c]));
    const inA = byId(a), inB = byId(b);
    const order = a.candidates.map((c) => c.id).concat(b.candidates.map((c) => c.id).filter((id) => !inA.has(id)));
    const keptA = a.candidates.filter((c) => c.kept), keptB = b.candidates.filter((c) => c.kept);
    const onlyA = keptA.filter((c) => !(inB.get(c.id) || {}).kept).length;
    const onlyB = keptB.filter((c) => !(inA.get(c.id) || {}).kept).length;
    const fact = (label, value, id) => el("span", { class: "fact", id }, el("b", { text: label }), " ", value);
    clear($("comparison-summary")).append(
      fact("A", describeSetting(a.body) + ": kept " + keptA.length + ", " + charsOf(keptA) + " characters",
        "compare-a"),
      fact("B", describeSetting(b.body) + ": kept " + keptB.length + ", " + charsOf(keptB) + " characters",
        "compare-b"),
      fact("kept only by A", String(onlyA), "only-a"), fact("kept only by B", String(onlyB), "only-b"));
    const table = clear($("comparison-table"));
    table.append(el("thead", {}, el("tr", {}, el("th", { text: "chunk" }),
      el("th", { text: "A" }), el("th", { text: "B" }))));
    const body = el("tbody");
    const cell = (c) => c
      ? el("td", { class: "decision " + (c.kept ? "kept" : "dropped") }, el("b", { text: c.kept ? "kept" : "dropped" }),
        " " + c.reason.replace(/_/g, " ") + " · " + fmt(c.score ?? c.retrievalScore) + " · rank " + (c.rank ?? "–"))
      : el("td", { class: "decision absent", text: "not retrieved" });
    for (const id of order) {
      const ca = inA.get(id), cb = inB.get(id), source = (ca || cb).source;
      const differs = !!(ca && ca.kept) !== !!(cb && cb.kept);
      body.append(el("tr", { class: differs ? "differs" : "", dataset: { id, a: ca ? String(ca.kept) : "absent",
        b: cb ? String(cb.kept) : "absent" } },
      el("td", { class: "chunk" }, el("div", { class: "head", text: header(source) }),
        el("div", { class: "where muted", text: id }), el("div", { class: "text", text: source.text || "" })),
      cell(ca), cell(cb)));
    }
    table.append(body);
  }

  function describeSetting(body) {
    const o = body.ext.chunkrag;
    if (o.stages === false) return "top-" + o.candidates + " hybrid";
    // No fixed_threshold: the calibration file's cut for this setting (the response names it).
    const cut = o.fixed_threshold ?? DEFAULT_THRESHOLD ?? "at the calibrated cut";
    return (o.judge_top ? "judge" : "filter") + ", " + (o.threshold || "fixed") + " " + cut +
      (o.mode ? ", " + o.mode : "");
  }

  // --- query sets ---------------------------------------------------------------------

  function parseQuerySet(text) {
    const items = [], problems = [];
    text.split(/\r?\n/).forEach((line, i) => {
      if (!line.trim()) return;
      let record;
      try { record = JSON.parse(line); } catch (exc) { problems.push("line " + (i + 1) + ": not JSON"); return; }
      const answers = record && Array.isArray(record.answers)
        ? record.answers.filter((a) => typeof a === "string" && a) : [];
      if (!record || typeof record.question !== "string" || !record.question.trim() || !answers.length) {
        problems.push("line " + (i + 1) + ": needs a question and a list of answers");
        return;
      }
      items.push({ question: record.question.trim(), answers });
    });
    return { items, problems };
  }

  // PopQA's rule, as `eval` applies it: any answer as a case-insensitive substring.
  function answerIn(candidates, answers) {
    const text = candidates.map((c) => c.source.text || "").join("\n").toLowerCase();
    return answers.some((answer) => text.includes(answer.toLowerCase()));
  }

  async function loadFile() {
    const file = $("queryset-file").files[0];
    if (file) $("queryset-text").value = await file.text();
  }

  function runQuerySet() {
    return busy("running the query set", async () => {
      await loadFile();
      const { items, problems } = parseQuerySet($("queryset-text").value);
      if (!items.length) {
        throw new ApiError(0, "no usable question" + (problems.length ? ": " + problems.join("; ") : ""));
      }
      const rows = [];
      for (const [i, item] of items.entries()) {
        $("status").textContent = "question " + (i + 1) + " of " + items.length + "…";
        const row = { item };
        for (const side of ["A", "B"]) {
          const result = await runSearch(side, item.question, optionsOf(side, { answer: false }));
          const kept = result.candidates.filter((c) => c.kept);
          const section = result.response.chunkrag || {};
          row[side] = { before: answerIn(result.candidates, item.answers), after: answerIn(kept, item.answers),
            chars: charsOf(kept), candidateChars: charsOf(result.candidates),
            threshold: section.threshold ? section.threshold.value : null,
            keptShare: result.candidates.length ? kept.length / result.candidates.length : 0,
            // Each candidate's final score and whether it holds an expected answer (eval's scores_by_gold).
            scores: result.candidates.map((c) => ({ score: finalScore(c, !!section.stages) || 0,
              gold: answerIn([c], item.answers) })) };
        }
        rows.push(row);
      }
      showQuerySet(rows, problems);
    });
  }

  function showQuerySet(rows, problems) {
    $("queryset-result").hidden = false;
    const n = rows.length;
    const rate = (side, key) => rows.filter((r) => r[side][key]).length / n;
    const mean = (side) => rows.reduce((t, r) => t + r[side].chars, 0) / n;
    const totals = {
      beforeA: rate("A", "before"), afterA: rate("A", "after"),
      beforeB: rate("B", "before"), afterB: rate("B", "after"),
      charsA: mean("A"), charsB: mean("B"),
    };
    $("queryset-result").dataset.totals = JSON.stringify(totals);
    drawQuerySet($("queryset-chart"), rows, totals);
    const yes = (value) => el("td", { class: value ? "yes" : "no", text: value ? "yes" : "no" });
    const table = clear($("queryset-table"));
    table.append(el("thead", {}, el("tr", {}, ["question", "answers", "before A", "after A", "before B", "after B",
      "chars kept A", "chars kept B"].map((h) => el("th", { text: h })))));
    const body = el("tbody");
    for (const r of rows) {
      body.append(el("tr", { dataset: { question: r.item.question } },
        el("td", { text: r.item.question }), el("td", { class: "muted", text: r.item.answers.join(" | ") }),
        yes(r.A.before), yes(r.A.after), yes(r.B.before), yes(r.B.after),
        el("td", { class: "num", text: String(r.A.chars) }), el("td", { class: "num", text: String(r.B.chars) })));
    }
    const pct = (v) => (100 * v).toFixed(0) + "%";
    body.append(el("tr", { class: "total", id: "queryset-total" },
      el("td", { text: "all " + n + " questions" }), el("td"),
      ["beforeA", "afterA", "beforeB", "afterB"].map((k) => el("td", { text: pct(totals[k]) })),
      el("td", { class: "num", text: totals.charsA.toFixed(0) + " mean" }),
      el("td", { class: "num", text: totals.charsB.toFixed(0) + " mean" })));
    table.append(body);
    if (problems.length) table.append(el("caption", { class: "error", text: "skipped: " + problems.join("; ") }));
  }

  // Like `eval`'s context_budget plot (rates before and after), plus the characters
  // each setting kept per question; drawn here as SVG rather than by matplotlib.
  function drawQuerySet(container, rows, totals) {
    clear(container);
    const height = 170, top = 14, bottom = 34;
    const rates = [["before A", totals.beforeA, "before"], ["after A", totals.afterA, "a"],
      ["before B", totals.beforeB, "before"], ["after B", totals.afterB, "b"]];
    const ratesChart = svg("svg", { width: 300, height, viewBox: `0 0 300 ${height}`, role: "img",
      "aria-label": "answer in context, before and after each setting" });
    const y = (v, max) => top + (height - top - bottom) * (1 - v / max);
    rates.forEach(([label, value, kind], i) => {
      const x = 20 + i * 68;
      ratesChart.append(
        svg("rect", { x, y: y(value, 1), width: 44, height: Math.max(1, y(0, 1) - y(value, 1)), class: "bar " + kind }),
        svg("text", { x: x + 22, y: y(value, 1) - 3, class: "tick", "text-anchor": "middle",
          text: (100 * value).toFixed(0) + "%" }),
        svg("text", { x: x + 22, y: height - 18, class: "tick", "text-anchor": "middle", text: label }));
    });
    ratesChart.append(svg("text", { x: 150, y: height - 4, class: "tick", "text-anchor": "middle",
      text: "answer in context" }));
    const maxChars = Math.max(1, ...rows.map((r) => Math.max(r.A.chars, r.B.chars)));
    const width = Math.max(300, 40 * rows.length + 40);
    const charsChart = svg("svg", { width, height, viewBox: `0 0 ${width} ${height}`, role: "img",
      "aria-label": "characters kept per question by each setting" });
    rows.forEach((r, i) => {
      const x = 20 + i * 40;
      charsChart.append(
        svg("rect", { x, y: y(r.A.chars, maxChars), width: 14,
          height: Math.max(1, y(0, maxChars) - y(r.A.chars, maxChars)), class: "bar a" }),
        svg("rect", { x: x + 15, y: y(r.B.chars, maxChars), width: 14,
          height: Math.max(1, y(0, maxChars) - y(r.B.chars, maxChars)), class: "bar b" }),
        svg("text", { x: x + 15, y: height - 18, class: "tick", "text-anchor": "middle", text: "q" + (i + 1) }));
    });
    charsChart.append(svg("text", { x: width / 2, y: height - 4, class: "tick", "text-anchor": "middle",
      text: "characters kept (A, B) per question; most " + maxChars }));
    const legend = el("div", { class: "legend muted" },
      el("span", { class: "swatch before" }), " before the filter ", el("span", { class: "swatch a" }), " setting A ",
      el("span", { class: "swatch b" }), " setting B; ", el("span", { class: "swatch mark" }),
      " the threshold chosen; dots: one per candidate");
    container.append(ratesChart, charsChart, keptChart(rows, height), goldChart(rows, height), legend);
  }

  function yTicks(chart, y, max) {
    for (const value of [0, max / 2, max]) {
      chart.append(svg("text", { x: 2, y: y(value) + 3, class: "tick", text: value.toFixed(1) }));
    }
  }

  // Like eval's kept_vs_threshold: per question, the share of candidates each setting kept, with the
  // threshold it chose marked.
  function keptChart(rows, height) {
    const top = 14, bottom = 34, width = Math.max(300, 40 * rows.length + 50);
    const y = (v) => top + (height - top - bottom) * (1 - Math.min(1, v));
    const chart = svg("svg", { width, height, viewBox: `0 0 ${width} ${height}`, role: "img", class: "kept-chart",
      "aria-label": "share of candidates kept per question, with the threshold" });
    yTicks(chart, y, 1);
    rows.forEach((r, i) => {
      const x = 30 + i * 40;
      ["A", "B"].forEach((side, j) => {
        const at = x + 15 * j, value = r[side];
        chart.append(svg("rect", { x: at, y: y(value.keptShare), width: 14,
          height: Math.max(1, y(0) - y(value.keptShare)), class: "bar " + side.toLowerCase() }));
        if (value.threshold !== null) {
          chart.append(svg("line", { x1: at - 2, x2: at + 16, y1: y(value.threshold), y2: y(value.threshold),
            class: "mark" }));
        }
      });
      chart.append(svg("text", { x: x + 15, y: height - 18, class: "tick", "text-anchor": "middle",
        text: "q" + (i + 1) }));
    });
    chart.append(svg("text", { x: width / 2, y: height - 4, class: "tick", "text-anchor": "middle",
      text: "share kept (A, B) and threshold per question" }));
    return chart;
  }

  // Like eval's scores_by_gold: the final scores of candidates with and without an expected answer.
  function goldChart(rows, height) {
    const top = 14, bottom = 34, width = 300;
    const groups = [["A", true], ["A", false], ["B", true], ["B", false]];
    const all = rows.flatMap((r) => ["A", "B"].flatMap((side) => r[side].scores.map((s) => s.score)));
    const max = Math.max(1, ...all);
    const y = (v) => top + (height - top - bottom) * (1 - v / max);
    const chart = svg("svg", { width, height, viewBox: `0 0 ${width} ${height}`, role: "img", class: "gold-chart",
      "aria-label": "final scores of candidates with and without an expected answer" });
    yTicks(chart, y, max);
    groups.forEach(([side, gold], g) => {
      const x = 30 + g * 68;
      const scores = rows.flatMap((r) => r[side].scores.filter((s) => s.gold === gold).map((s) => s.score));
      scores.forEach((score, k) => {
        chart.append(svg("circle", { cx: x + 6 + (k * 7) % 32, cy: y(score), r: 3,
          class: "dot " + side.toLowerCase() + (gold ? " gold" : "") }));
      });
      chart.append(svg("text", { x: x + 22, y: height - 18, class: "tick", "text-anchor": "middle",
        text: side + (gold ? " answer" : " none") }));
    });
    chart.append(svg("text", { x: width / 2, y: height - 4, class: "tick", "text-anchor": "middle",
      text: "final score, candidates with / without an answer" }));
    return chart;
  }

  // --- copy as --------------------------------------------------------------------------

  function showCopy() {
    $("copy").hidden = false;
    const side = $("copy-side");
    side.querySelector('option[value="B"]').disabled = !state.requests.B;
    if (!state.requests[side.value]) side.value = "A";
    renderCopy();
  }

  function renderCopy() {
    const request = state.requests[$("copy-side").value];
    if (!request) return;
    for (const tab of document.querySelectorAll(".tab")) {
      tab.classList.toggle("active", tab.dataset.copy === state.copyFormat);
    }
    $("copy-title").textContent = "setting " + $("copy-side").value + " · " + request.index;
    $("copy-text").textContent = copyText(state.copyFormat, request.index, request.body);
  }

  function py(value, indent = "") {
    if (value === null) return "None";
    if (value === true) return "True";
    if (value === false) return "False";
    if (typeof value === "number" || typeof value === "string") return JSON.stringify(value);
    const inner = indent + "    ";
    if (Array.isArray(value)) return "[" + value.map((v) => py(v, inner)).join(", ") + "]";
    const entries = Object.entries(value).map(([k, v]) => inner + JSON.stringify(k) + ": " + py(v, inner));
    return entries.length ? "{\n" + entries.join(",\n") + ",\n" + indent + "}" : "{}";
  }

  function copyText(format, index, body) {
    const url = location.origin + ROOT;
    const json = JSON.stringify(body, null, 2);
    if (format === "body") return json;
    const postSearched = body.ext.chunkrag.mode === "post_search";
    // Post-search: the body as a whole (it may hold aggs, sort, from...); each hit with its kept passages.
    const printed = postSearched
      ? 'for hit in response["hits"]["hits"]:\n    print(hit["_index"], hit["_id"], len(hit["_chunkrag"]["passages"]))\n'
      : 'for hit in response["hits"]["hits"]:\n    print(hit["_id"], hit["_chunkrag"]["reason"])\n';
    if (format === "curl") {
      const auth = { basic: ' -u "$ES_USER:$ES_PASSWORD"', apikey: ' -H "Authorization: ApiKey $ES_API_KEY"',
        none: "" }[state.scheme];
      const quoted = "'" + json.replace(/'/g, "'\\''") + "'";
      return "curl -s -X POST " + JSON.stringify(url + indexPath(index, "_search")) + auth +
        " \\\n  -H 'Content-Type: application/json' \\\n  -d " + quoted;
    }
    if (format === "python-es") {
      const auth = { basic: ', basic_auth=(os.environ["ES_USER"], os.environ["ES_PASSWORD"])',
        apikey: ', api_key=os.environ["ES_API_KEY"]', none: "" }[state.scheme];
      if (postSearched) {
        return "import os\n\nfrom elasticsearch import Elasticsearch\n\n" +
          "es = Elasticsearch(" + JSON.stringify(url) + auth + ")\n" +
          "response = es.search(index=" + JSON.stringify(index) + ", body=" + py(body) + ")\n" + printed;
      }
      return "import os\n\nfrom elasticsearch import Elasticsearch\n\n" +
        "es = Elasticsearch(" + JSON.stringify(url) + auth + ")\n" +
        "response = es.search(\n    index=" + JSON.stringify(index) + ",\n    query=" + py(body.query, "    ") +
        ",\n    size=" + body.size + ",\n    ext=" + py(body.ext, "    ") + ",\n)\n" + printed;
    }
    const auth = { basic: ', http_auth=(os.environ["ES_USER"], os.environ["ES_PASSWORD"])',
      apikey: ', headers={"Authorization": "ApiKey " + os.environ["ES_API_KEY"]}', none: "" }[state.scheme];
    return "import os\n\nfrom opensearchpy import OpenSearch\n\n" +
      "client = OpenSearch([" + JSON.stringify(url) + "]" + auth + ")\n" +
      "response = client.search(index=" + JSON.stringify(index) + ", body=" + py(body) + ")\n" + printed;
  }

  async function copyToClipboard() {
    const text = $("copy-text").textContent;
    try {
      await navigator.clipboard.writeText(text);
      $("copy-button").textContent = "Copied";
    } catch (exc) {
      // No clipboard permission (an insecure origin): select it for the user to copy.
      const range = document.createRange();
      range.selectNodeContents($("copy-text"));
      getSelection().removeAllRanges();
      getSelection().addRange(range);
      $("copy-button").textContent = "Selected: press Ctrl+C";
    }
    setTimeout(() => { $("copy-button").textContent = "Copy"; }, 2000);
  }

  // --- wiring ---------------------------------------------------------------------------

  function start() {
    $("auth-scheme").addEventListener("change", showScheme);
    $("login-form").addEventListener("submit", signIn);
    $("sign-out").addEventListener("click", signOut);
    buildSettings($("settings-a"), "filter", true);
    buildSettings($("settings-b"), "topk", false);
    $("ask").addEventListener("click", ask);
    $("compare").addEventListener("click", compare);
    $("question").addEventListener("keydown", (event) => { if (event.key === "Enter") ask(); });
    $("question").addEventListener("input", fillBody);
    $("index").addEventListener("change", indexChanged);
    $("body-editor").addEventListener("input", () => { state.bodyEdited = true; });
    $("body-reset").addEventListener("click", () => { state.bodyEdited = false; fillBody(); });
    for (const choice of DEFAULTS.empty_hits) {
      $("ps-empty-hits").append(el("option", { value: choice, text: choice === "drop"
        ? "drop (left out, counted)" : choice === "keep" ? "keep (marked)" : choice }));
    }
    $("ps-empty-hits").value = DEFAULTS.empty_hits_default;
    Object.assign($("ps-max-passages"), { value: DEFAULTS.max_passages, max: DEFAULTS.max_passages_limit });
    $("queryset-file").addEventListener("change", loadFile);
    $("queryset-run").addEventListener("click", runQuerySet);
    for (const tab of document.querySelectorAll(".tab")) {
      tab.addEventListener("click", () => { state.copyFormat = tab.dataset.copy; renderCopy(); });
    }
    $("copy-side").addEventListener("change", renderCopy);
    $("copy-button").addEventListener("click", copyToClipboard);
    showScheme();
    document.body.dataset.ready = "true";
  }

  document.addEventListener("DOMContentLoaded", start);
})();
