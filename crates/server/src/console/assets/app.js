// stasis console: session, API calls, routing and the live feed. Pages are
// in pages.js, the terminal in terminal.js. Every element is built with
// el() (text nodes, never HTML strings from data).
"use strict";

const App = {
  session: null,   // {csrf, tenant, admin, actor, expires_at_ms}
  pages: {},       // name -> async function(view, arg)
  events: null,
  refreshTimer: null,
  current: null,
  generation: 0,
};
window.App = App;

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") e.className = v;
    else if (k === "text") e.textContent = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? "" : v);
  }
  for (const k of kids.flat(Infinity)) {
    if (k === null || k === undefined || k === false) continue;
    e.append(k instanceof Node ? k : document.createTextNode(String(k)));
  }
  return e;
}
App.el = el;

const SVGNS = "http://www.w3.org/2000/svg";
App.svg = function (tag, attrs, ...kids) {
  const e = document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "text") e.textContent = v; else e.setAttribute(k, v);
  }
  for (const k of kids.flat()) if (k) e.append(k);
  return e;
};

class ApiError extends Error {
  constructor(status, code, message) { super(message); this.status = status; this.code = code; }
}
App.ApiError = ApiError;

// One JSON API call with the session cookie (and the CSRF token when it changes state).
App.api = async function (method, path, body) {
  const headers = {};
  if (method !== "GET" && App.session) headers["x-csrf-token"] = App.session.csrf;
  let payload;
  if (body !== undefined) { headers["content-type"] = "application/json"; payload = JSON.stringify(body); }
  const r = await fetch(path, { method, headers, body: payload, credentials: "same-origin" });
  const text = await r.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch (_) { data = text; }
  if (!r.ok) {
    const e = (data && data.error) || {};
    if (r.status === 401 && path !== "/ui/login") showLogin("Your session ended; sign in again.");
    throw new ApiError(r.status, e.code || String(r.status), e.message || r.statusText);
  }
  return data;
};

App.fmtTime = (ms) => ms ? new Date(ms).toLocaleString() : "";
App.fmtBytes = function (n) {
  if (n === null || n === undefined) return "";
  const u = ["B", "KiB", "MiB", "GiB", "TiB"]; let i = 0; n = Number(n);
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : n) + " " + u[i];
};
App.fmtDur = function (ms) {
  if (ms === null || ms === undefined) return "";
  const neg = ms < 0; ms = Math.abs(ms);
  const s = Math.floor(ms / 1000), d = Math.floor(s / 86400), h = Math.floor(s % 86400 / 3600),
    m = Math.floor(s % 3600 / 60), r = s % 60;
  const t = d ? `${d}d ${h}h` : h ? `${h}h ${m}m` : m ? `${m}m ${r}s` : `${r}s`;
  return neg ? "-" + t : t;
};

App.toast = function (msg) {
  const t = el("div", { text: msg });
  document.getElementById("toast").append(t);
  setTimeout(() => t.remove(), 5000);
};

// A page's failure, shown where the page would be.
App.fail = function (view, e) {
  view.replaceChildren(el("div", { class: "card" },
    el("h1", { text: e.status === 404 ? "Not found" : "Error" }),
    el("p", { class: "error", role: "alert", text: `${e.code || ""}: ${e.message}` }),
  ));
};

function showLogin(msg) {
  App.session = null;
  if (App.events) { App.events.close(); App.events = null; }
  document.getElementById("nav").hidden = true;
  document.getElementById("who").hidden = true;
  document.getElementById("view").replaceChildren();
  document.getElementById("login").hidden = false;
  document.getElementById("login-error").textContent = msg || "";
  document.getElementById("login-token").focus();
}

function signedIn(s) {
  App.session = s;
  document.getElementById("login").hidden = true;
  document.getElementById("nav").hidden = false;
  document.getElementById("who").hidden = false;
  document.getElementById("who-text").textContent =
    `${s.actor} · ${s.admin ? "admin" : s.tenant}`;
  for (const a of document.querySelectorAll("#nav a")) {
    const p = a.dataset.page;
    a.hidden = s.admin ? !["admin", "audit", "metrics"].includes(p) : p === "admin";
  }
  if (!s.admin) startEvents();
  route();
}

async function login(ev) {
  ev.preventDefault();
  const tokenInput = document.getElementById("login-token");
  const errEl = document.getElementById("login-error");
  errEl.textContent = "";
  try {
    const s = await App.api("POST", "/ui/login", {
      token: tokenInput.value, actor: document.getElementById("login-actor").value || null,
    });
    tokenInput.value = "";
    if (!location.hash || location.hash === "#/") location.hash = s.admin ? "#/admin" : "#/approvals";
    signedIn(s);
  } catch (e) {
    tokenInput.value = "";
    errEl.textContent = e.status === 401 ? "Sign-in failed: that token is not valid (unknown, revoked or expired)." : `Sign-in failed: ${e.message}`;
    tokenInput.focus();
  }
}

async function logout() {
  try { await App.api("POST", "/ui/logout"); } catch (_) { /* signed out anyway */ }
  location.hash = "";
  showLogin("Signed out.");
}

// Live updates: the tenant's audit events; the page shown refreshes when one concerns it.
function startEvents() {
  if (App.events || !window.EventSource) return;
  const live = document.getElementById("live");
  const es = new EventSource("/v1/events");
  App.events = es;
  es.addEventListener("ready", () => { live.classList.add("on"); live.title = "live updates on"; });
  es.addEventListener("audit", (m) => {
    let e = {};
    try { e = JSON.parse(m.data); } catch (_) { return; }
    document.dispatchEvent(new CustomEvent("stasis-event", { detail: e }));
    scheduleRefresh();
  });
  es.onerror = () => { live.classList.remove("on"); live.title = "live updates reconnecting"; };
}

function scheduleRefresh() {
  if (!App.current || !App.current.live) return;
  // Never rebuild a page under a user typing in it.
  const a = document.activeElement;
  if (a && (a.tagName === "TEXTAREA" || a.tagName === "SELECT" || (a.tagName === "INPUT" && a.type !== "button"))) return;
  clearTimeout(App.refreshTimer);
  App.refreshTimer = setTimeout(() => route(true), 400);
}

async function updateBadge() {
  if (!App.session || App.session.admin) return;
  try {
    const runs = await App.api("GET", "/v1/runs");
    const n = runs.reduce((s, r) => s + (r.pending_approvals || 0), 0);
    const b = document.getElementById("pending-badge");
    b.hidden = n === 0; b.textContent = String(n);
    b.setAttribute("aria-label", `${n} pending`);
  } catch (_) { /* the page says why */ }
}

async function route(refresh) {
  if (!App.session) return;
  const hash = location.hash.replace(/^#\/?/, "");
  const [name, ...rest] = hash.split("/");
  const page = name || (App.session.admin ? "admin" : "approvals");
  const arg = rest.map(decodeURIComponent).join("/");
  for (const a of document.querySelectorAll("#nav a")) {
    if (a.dataset.page === page) a.setAttribute("aria-current", "page"); else a.removeAttribute("aria-current");
  }
  const fn = App.pages[page];
  const view = document.getElementById("view");
  if (!refresh && App.current && App.current.leave) { App.current.leave(); App.current.leave = null; }
  if (!fn) { App.current = null; App.fail(view, { status: 404, code: "not_found", message: `no page ${page}` }); return; }
  const fresh = el("div", { id: "page-" + page });
  // Only the newest navigation may fill the view.
  const gen = ++App.generation;
  try {
    const ctl = (await fn(fresh, arg, refresh)) || {};
    ctl.key = page + "/" + arg;
    if (gen !== App.generation) { if (ctl.leave) ctl.leave(); return; }
    const cur = App.current;
    if (refresh && cur && cur.key === ctl.key && ctl.sig !== undefined && ctl.sig === cur.sig) {
      // Nothing changed: keep the page as it is (focus, scroll, typing).
      if (ctl.leave) ctl.leave();
    } else {
      if (cur && cur.leave) cur.leave();
      App.current = ctl;
      view.replaceChildren(fresh);
    }
  } catch (e) {
    if (gen !== App.generation) return;
    if (App.current && App.current.leave) App.current.leave();
    App.current = null;
    App.fail(view, e);
  }
  document.body.dataset.page = page;
  document.body.dataset.ready = String(Date.now());
  updateBadge();
}
App.route = route;

document.addEventListener("DOMContentLoaded", async () => {
  document.getElementById("login-form").addEventListener("submit", login);
  document.getElementById("logout").addEventListener("click", logout);
  window.addEventListener("hashchange", () => route());
  try {
    const s = await App.api("GET", "/ui/session");
    signedIn(s);
  } catch (_) {
    showLogin("");
  }
});
