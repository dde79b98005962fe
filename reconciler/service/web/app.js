// kdispatch web page: polls /api/v1 and draws with DOM nodes and textContent only. Every name
// shown (jobs, queues, clusters, reasons) comes from users: none is ever parsed as HTML.
"use strict";

const REFRESH_MS = 2000;
const PHASES = ["Queued", "Unschedulable", "Suspended", "Nominated", "Placed", "Finished", "Deleted"];
const filters = { text: "", queue: "", phase: "" };
let drawing = false;

// el("td", {class: "num"}, "text", otherNode): strings become text nodes, never markup.
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") node.className = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, String(v));
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

function jobHref(key) {
  const [ns, ...rest] = key.split("/");
  return "#/jobs/" + encodeURIComponent(ns) + "/" + encodeURIComponent(rest.join("/"));
}

function amount(resource, value) {
  if (value === undefined || value === null) return "–";
  if (resource === "cpu") return (value / 1000).toLocaleString(undefined, { maximumFractionDigits: 1 });
  if (resource === "memory" || resource.endsWith("storage")) {
    const gi = value / (1 << 30);
    return gi >= 1 ? gi.toLocaleString(undefined, { maximumFractionDigits: 1 }) + "Gi" : Math.round(value / (1 << 20)) + "Mi";
  }
  return value.toLocaleString();
}

function when(ms) {
  return ms ? new Date(ms).toISOString().replace("T", " ").replace("Z", "") : "";
}

// A wait as a person says it, in the words of `kdispatch queue` (reconciler.forecast.approx).
function approx(deltaMs) {
  const s = Math.floor(Math.max(deltaMs, 0) / 1000);
  if (s < 60) return "<1 min";
  if (s < 3600) return "~" + Math.round(s / 60) + " min";
  if (s < 48 * 3600) return "~" + (s / 3600).toFixed(1).replace(/\.0$/, "") + " h";
  return "~" + Math.round(s / 86400) + " d";
}

// The forecast's expected start, counted from the log time the rows show ("" without one).
function expected(j, atMs) {
  if (j.expected_start_ms === null || j.expected_start_ms === undefined) return "";
  return approx(j.expected_start_ms - atMs) + " on " + j.expected_cluster;
}

function bar(label, used, total, resource, cls) {
  const pct = total > 0 ? Math.min(100, (100 * used) / total) : 0;
  const fill = el("div", { class: "fill" + (cls ? " " + cls : "") + (pct >= 99.5 ? " full" : "") });
  fill.style.width = pct.toFixed(1) + "%";
  const num = total > 0 ? amount(resource, used) + " / " + amount(resource, total) : amount(resource, used);
  return el("div", { class: "bar", title: label + ": " + num }, el("span", {}, label), el("div", { class: "track" }, fill), el("span", { class: "num" }, num));
}

// With web.authorization: kubernetes the API wants a bearer token (a Kubernetes token of the
// manager cluster, e.g. `kubectl create token NAME`). It is kept in sessionStorage: this tab
// only, gone when it closes; sent only to this origin.
const TOKEN_KEY = "kdispatch-token";

class NeedToken extends Error {}

async function api(path) {
  const headers = { Accept: "application/json" };
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) headers.Authorization = "Bearer " + token;
  const resp = await fetch(path, { headers });
  const doc = await resp.json().catch(() => ({ error: resp.status + " " + resp.statusText }));
  if (resp.status === 401) throw new NeedToken(doc.error || resp.statusText);
  if (!resp.ok) throw new Error(doc.error || resp.statusText);
  return doc;
}

function loginForm(message) {
  const input = el("input", { type: "password", id: "token", autocomplete: "off", placeholder: "bearer token", size: 60 });
  const form = el("form", { class: "card login", onsubmit: (e) => {
    e.preventDefault();
    sessionStorage.setItem(TOKEN_KEY, input.value.trim());
    refresh();
  } },
    el("h3", {}, "sign in"),
    el("p", { class: "muted" }, message),
    el("p", { class: "muted" }, "A token of the manager cluster (kubectl create token SERVICEACCOUNT, or your own): you see the jobs of the namespaces where you may list Jobs. Kept in this tab only."),
    input, el("button", { type: "submit" }, "show"));
  return form;
}

// ---- overview: queues, clusters, jobs -----------------------------------------------------

function fleetCapacity(clusters) {
  const total = {};
  for (const c of clusters) if (c.health === "Ready") for (const [r, v] of Object.entries(c.capacity)) total[r] = (total[r] || 0) + v;
  return total;
}

// With queues configured, usage and quota are per "flavor/resource" ("default/cpu",
// "gpu/nvidia.com/gpu"); the unit comes from the resource.
function resourceOf(key) {
  const cut = key.indexOf("/");
  return cut > 0 && !key.slice(0, cut).includes(".") ? key.slice(cut + 1) : key;
}

function queueCard(q, capacity) {
  const quota = q.quota || null;
  const resources = Object.keys(quota || capacity).filter((r) => (quota || capacity)[r] > 0 || q.usage[r]);
  return el("div", { class: "card queue", "data-queue": q.name },
    el("h3", {}, el("span", {}, q.name),
      q.fair_share !== null && q.fair_share !== undefined ? el("span", { class: "badge" }, "share " + q.fair_share.toFixed(2)) : null,
      q.weight !== null && q.weight !== undefined ? el("span", { class: "badge" }, "weight " + q.weight) : null,
      q.cohort ? el("span", { class: "badge" }, "cohort " + q.cohort) : null),
    el("div", { class: "stats" },
      el("div", {}, el("b", {}, q.pending), "pending"),
      el("div", {}, el("b", {}, q.admitted), "admitted"),
      el("div", {}, el("b", {}, q.finished), "finished"),
      q.suspended ? el("div", {}, el("b", {}, q.suspended), "suspended") : null),
    resources.map((r) => bar(r, q.usage[r] || 0, (quota || capacity)[r] || 0, resourceOf(r))),
    q.fair_share !== null && q.fair_share !== undefined ? bar("fair share", Math.round(q.fair_share * 100), 100, "share", "share") : null,
    el("div", { class: "muted" }, quota ? "usage vs nominal quota" : "usage vs the fleet's ready capacity (no quota set)"));
}

function clusterTable(clusters) {
  return el("table", { class: "clusters" },
    el("tr", {}, el("th", {}, "cluster"), el("th", {}, "health"), el("th", {}, "jobs"), el("th", {}, "usage / capacity"), el("th", {}, "taints")),
    clusters.map((c) => el("tr", { "data-cluster": c.name },
      el("td", {}, el("b", {}, c.name), el("div", { class: "muted" }, Object.entries(c.labels).map(([k, v]) => k + "=" + v).join(" "))),
      el("td", {}, el("span", { class: "badge " + c.health }, c.health), el("div", { class: "muted" }, "seen " + when(c.last_seen_ms))),
      el("td", { class: "num" }, c.jobs),
      el("td", { class: "usage-cell" }, Object.keys(c.capacity).filter((r) => c.capacity[r] > 0).map((r) => bar(r, c.used[r] || 0, c.capacity[r], r))),
      el("td", { class: "muted" }, c.taints.join(", ")))));
}

function jobTable(rows, atMs) {
  return el("table", { class: "jobs" },
    el("tr", {}, el("th", {}, "#"), el("th", {}, "job"), el("th", {}, "phase"), el("th", {}, "queue"), el("th", {}, "priority"), el("th", {}, "cluster"), el("th", {}, "expected start"), el("th", {}, "reason")),
    rows.map((j) => el("tr", { "data-job": j.key },
      el("td", { class: "num" }, j.position ?? ""),
      el("td", {}, el("a", { href: jobHref(j.key) }, j.key)),
      el("td", {}, el("span", { class: "badge " + j.phase }, j.phase)),
      el("td", {}, j.queue),
      el("td", { class: "num" }, j.priority),
      el("td", {}, j.cluster || (j.nominated.length ? "→ " + j.nominated.join(", ") : "")),
      el("td", { class: "expected", title: j.expected_start_ms ? when(j.expected_start_ms) + " UTC" : "" }, expected(j, atMs)),
      el("td", { class: "muted" }, j.reason))));
}

async function loadJobs(limitPages) {
  const params = new URLSearchParams({ limit: "50" });
  if (filters.queue) params.set("queue", filters.queue);
  if (filters.phase) params.set("phase", filters.phase);
  let rows = [];
  let token = null;
  let total = 0;
  let atMs = 0;
  for (let page = 0; page < limitPages; page++) {
    if (token) params.set("continue", token);
    const doc = await api("/api/v1/jobs?" + params);
    rows = rows.concat(doc.items);
    total = doc.total;
    atMs = doc.at_ms;
    token = doc.continue;
    if (!token) break;
  }
  const text = filters.text.toLowerCase();
  return { rows: text ? rows.filter((j) => (j.key + " " + j.reason + " " + (j.cluster || "")).toLowerCase().includes(text)) : rows, total, more: !!token, atMs };
}

function filterBar(queues) {
  const queue = el("select", { id: "f-queue", onchange: (e) => { filters.queue = e.target.value; refresh(); } },
    el("option", { value: "" }, "all queues"), queues.map((q) => el("option", { value: q.name, selected: q.name === filters.queue }, q.name)));
  const phase = el("select", { id: "f-phase", onchange: (e) => { filters.phase = e.target.value; refresh(); } },
    el("option", { value: "" }, "all phases"), PHASES.map((p) => el("option", { value: p, selected: p === filters.phase }, p)));
  const text = el("input", { id: "f-text", type: "search", placeholder: "filter by name, reason, cluster", value: filters.text, size: 36 });
  text.addEventListener("input", () => { filters.text = text.value; refresh(); });
  return el("div", { class: "filters" }, text, queue, phase);
}

let jobPages = 1;

async function drawOverview(main, jobsOnly) {
  const [queues, clusters, jobs] = await Promise.all([api("/api/v1/queues"), api("/api/v1/clusters"), loadJobs(jobPages)]);
  setWhere(queues);
  const capacity = fleetCapacity(clusters.items);
  const focused = document.activeElement && document.activeElement.id;
  const parts = [];
  if (!jobsOnly) {
    parts.push(el("h2", {}, "Queues"), el("div", { class: "cards" }, queues.items.map((q) => queueCard(q, capacity))));
    parts.push(el("h2", {}, "Clusters"), clusterTable(clusters.items));
  }
  parts.push(el("h2", {}, "Jobs ", el("span", { class: "muted" }, "(" + jobs.rows.length + " shown of " + jobs.total + "; waiting jobs first, in dispatch order)")));
  parts.push(filterBar(queues.items), jobTable(jobs.rows, jobs.atMs));
  if (jobs.more) parts.push(el("p", {}, el("button", { onclick: () => { jobPages += 1; refresh(); } }, "load more")));
  main.replaceChildren(...parts.filter((part) => part !== null));
  if (focused) {
    const again = document.getElementById(focused);
    if (again) { again.focus(); if (again.setSelectionRange && again.value) again.setSelectionRange(again.value.length, again.value.length); }
  }
}

// ---- one job: facts, explanation, timeline -------------------------------------------------

function verdictRow(v, chosen) {
  const verdict = v.feasible
    ? el("span", { class: "badge " + (chosen.includes(v.cluster) ? "chosen" : "feasible") }, "#" + v.rank + (chosen.includes(v.cluster) ? " chosen" : " feasible"))
    : el("span", { class: "badge rejected" }, "rejected");
  const detail = v.feasible
    ? el("div", { class: "scores" }, (v.scores || []).map((s) => {
        const fill = el("div", { class: "fill" });
        fill.style.width = Math.max(0, Math.min(100, s.score)) + "%";
        return [el("span", {}, s.plugin + (s.weight !== 1 ? " ×" + s.weight : "")), el("div", { class: "track" }, fill), el("span", { class: "num" }, s.score)];
      }).flat())
    : el("ul", { class: "rejections" }, (v.rejections || []).map((r) => el("li", {}, el("b", {}, r.plugin), ": " + r.reason + " ", el("span", { class: "muted" }, r.code))));
  return el("tr", { "data-verdict": v.cluster }, el("td", {}, el("b", {}, v.cluster)), el("td", {}, verdict), el("td", { class: "num" }, v.total ?? ""), el("td", {}, detail));
}

function explanationPart(x, job) {
  if (!x) return el("p", { class: "muted" }, "no explanation: the job is not in the state");
  const chosen = job.cluster ? [job.cluster] : x.nominated || [];
  return [
    el("p", {}, "profile ", el("b", {}, x.profile), " (" + (x.strategy || "?") + "), priority " + x.priority + ", attempt " + x.attempt + (x.summary ? " — " + x.summary : "")),
    (x.claims || []).map((line) => el("p", { class: "muted" }, line)),
    el("table", { class: "explanation" },
      el("tr", {}, el("th", {}, "cluster"), el("th", {}, "verdict"), el("th", {}, "score"), el("th", {}, "scores by plugin / why rejected")),
      (x.clusters || []).map((v) => verdictRow(v, chosen))),
  ];
}

async function drawJob(main, ns, name) {
  const doc = await api("/api/v1/jobs/" + encodeURIComponent(ns) + "/" + encodeURIComponent(name));
  setWhere(doc);
  const j = doc.job;
  const facts = el("dl", { class: "facts" },
    el("dt", {}, "phase"), el("dd", {}, el("span", { class: "badge " + j.phase, id: "job-phase" }, j.phase)),
    el("dt", {}, "queue"), el("dd", { id: "job-queue" }, j.queue + (j.position ? " — position " + j.position + " in dispatch order" : "")),
    el("dt", {}, "cluster"), el("dd", { id: "job-cluster" }, j.cluster || (j.nominated.length ? "nominated: " + j.nominated.join(", ") : "none yet")),
    el("dt", {}, "priority"), el("dd", {}, j.priority),
    el("dt", {}, "attempt"), el("dd", {}, j.attempt),
    el("dt", {}, "demand"), el("dd", {}, Object.entries(j.demand).map(([r, v]) => r + " " + amount(r, v)).join(", ")),
    el("dt", {}, "reason"), el("dd", {}, j.reason || "—"),
    el("dt", {}, "expected start"), el("dd", { id: "job-expected" },
      j.expected_start_ms ? expected(j, doc.at_ms) + " (" + when(j.expected_start_ms) + " UTC, if nothing new comes)" : "—"));
  const timeline = el("table", { class: "timeline" },
    el("tr", {}, el("th", {}, "seq"), el("th", {}, "time (UTC)"), el("th", {}, "event"), el("th", {}, "details")),
    doc.timeline.map((t) => el("tr", { class: t.decision ? "decision" : "fact" },
      el("td", { class: "num" }, t.seq), el("td", {}, when(t.at_ms)), el("td", {}, t.type), el("td", { class: "muted" }, t.text))));
  main.replaceChildren(...[
    el("p", {}, el("a", { href: "#/" }, "← overview")),
    el("h1", { id: "job-name" }, j.key),
    facts,
    el("h2", {}, "Explanation ", el("span", { class: "muted" }, "(each cluster as the core judges the job at log seq " + doc.seq + ")")),
    el("div", { id: "explanation" }, explanationPart(doc.explanation, j)),
    el("h2", {}, "Timeline"),
    timeline,
    doc.timeline_truncated ? el("p", { class: "muted" }, "timeline cut short; `kdispatch explain " + j.key + "` has all of it") : null,
  ].filter((part) => part !== null));
}

// ---- routing and refresh ------------------------------------------------------------------

function setWhere(doc) {
  document.getElementById("where").textContent = "log seq " + doc.seq + " · " + when(doc.at_ms) + " UTC";
}

async function refresh() {
  if (drawing) return;
  drawing = true;
  const main = document.getElementById("main");
  const live = document.getElementById("live");
  try {
    const route = location.hash.replace(/^#/, "") || "/";
    const m = route.match(/^\/jobs\/([^/]+)\/(.+)$/);
    if (m) await drawJob(main, decodeURIComponent(m[1]), decodeURIComponent(m[2]));
    else await drawOverview(main, route === "/jobs");
    live.classList.remove("stale");
  } catch (err) {
    live.classList.add("stale");
    if (err instanceof NeedToken) {
      // Not redrawn while the form is up: polling must not wipe what is being typed.
      if (!document.getElementById("token")) main.replaceChildren(loginForm(String(err.message)));
    } else main.replaceChildren(el("div", { class: "error" }, String(err.message || err)));
  } finally {
    drawing = false;
  }
}

window.addEventListener("hashchange", () => { jobPages = 1; window.scrollTo(0, 0); refresh(); });
document.addEventListener("DOMContentLoaded", () => {
  refresh();
  setInterval(refresh, REFRESH_MS);
});
