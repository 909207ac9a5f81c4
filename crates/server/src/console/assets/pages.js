// The console's pages. Each takes the element to fill and the route's
// argument, fills it, and returns {live, leave}: live pages are rebuilt
// when the event feed reports a change.
"use strict";
(function () {
const { el, api, fmtTime, fmtBytes, fmtDur } = App;
const enc = encodeURIComponent;

function table(headers, rows, label) {
  return el("div", { class: "table-wrap" },
    el("table", { "aria-label": label },
      el("thead", {}, el("tr", {}, headers.map((h) => el("th", { scope: "col", text: h })))),
      el("tbody", {}, rows)));
}
function kv(pairs) {
  return el("dl", { class: "kv" }, pairs.filter((p) => p[1] !== undefined && p[1] !== null && p[1] !== "")
    .map(([k, v]) => [el("dt", { text: k }), el("dd", {}, v)]));
}
function pill(text, kind) { return el("span", { class: "pill " + (kind || ""), text }); }
function argvText(call) { return call ? call.spec.argv.join(" ") : "?"; }
const CALL_KIND = { succeeded: "ok", failed: "bad", rejected: "bad", outcome_unknown: "bad",
  awaiting_approval: "warn", intent_recorded: "warn" };
const ROW_KIND = { ok: "good", bad: "bad", warn: "warn" };
function stateOf(s) { return typeof s === "string" ? s : String(s); }

// Who asked for a call: the actor of its tool_call_requested step.
function askedBy(run, callId) {
  const s = run.steps.find((x) => x.call === callId && x.kind === "tool_call_requested");
  return s ? s.actor : "";
}
function stepList(run, label) {
  return el("ol", { class: "steps", "aria-label": label },
    run.steps.map((s) => el("li", { class: ["rejected", "failed"].includes(s.kind) ? "bad" : "" },
      el("strong", { text: s.kind }), ` · ${s.actor} · ${fmtTime(s.at_ms)}`,
      s.call ? el("span", { class: "mono" }, ` · ${s.call}`) : null,
      s.data && Object.keys(s.data).length ? el("span", { class: "muted mono" }, " " + JSON.stringify(s.data).slice(0, 200)) : null)));
}

// ---------------------------------------------------------------- approvals
App.pages.approvals = async function (view) {
  const runs = await api("GET", "/v1/runs");
  runs.sort((a, b) => b.updated_at_ms - a.updated_at_ms);
  const wanted = runs.filter((r) => r.pending_approvals > 0).concat(runs.filter((r) => !r.pending_approvals).slice(0, 15));
  const details = await Promise.all(wanted.map((r) => api("GET", `/v1/runs/${enc(r.id)}`)));
  const pending = [], decided = [];
  for (const run of details) {
    for (const ap of run.approvals) {
      const call = run.tool_calls.find((c) => c.id === ap.call);
      (ap.decision ? decided : pending).push({ run, ap, call });
    }
  }
  pending.sort((a, b) => a.ap.requested_at_ms - b.ap.requested_at_ms);
  decided.sort((a, b) => b.ap.decision.at_ms - a.ap.decision.at_ms);
  view.append(el("h1", { text: "Approvals" }),
    el("p", { role: "status", id: "pending-count", tabindex: "-1",
      text: pending.length ? `${pending.length} action(s) waiting for a decision.` : "Nothing is waiting for a decision." }));
  const list = el("div", { class: "grid" });
  pending.forEach(({ run, ap, call }, i) => list.append(approvalCard(run, ap, call, i)));
  view.append(list);
  view.append(el("h2", { text: "Decided" }));
  view.append(decided.length ? table(["Action", "Decision", "By", "Reason", "When", "Outcome", "Run"],
    decided.map(({ run, ap, call }) => el("tr", { class: ap.decision.approved ? "" : "bad", "data-call": ap.call },
      el("td", { class: "mono", text: argvText(call) }),
      el("td", {}, pill(ap.decision.approved ? "approved" : "rejected", ap.decision.approved ? "ok" : "bad")),
      el("td", { text: ap.decision.by }),
      el("td", { text: ap.decision.reason }),
      el("td", { text: fmtTime(ap.decision.at_ms) }),
      el("td", {}, call ? pill(stateOf(call.state), CALL_KIND[call.state]) : ""),
      el("td", {}, el("a", { href: `#/run/${enc(run.id)}`, text: run.id })))), "Decided actions")
      : el("p", { class: "muted", text: "No decisions yet among recent runs." }));
  return { live: true, sig: JSON.stringify(details.map((r) => [r.id, r.updated_at_ms])) };
};

function approvalCard(run, ap, call, i) {
  const id = `ap-${i}`;
  const reason = el("textarea", { id: `${id}-reason`, required: true, "aria-required": "true",
    "aria-describedby": `${id}-err` });
  const err = el("p", { id: `${id}-err`, class: "error", role: "alert" });
  const approve = el("button", { type: "button", class: "approve", "data-action": "approve" }, "Approve");
  const reject = el("button", { type: "button", class: "reject", "data-action": "reject" }, "Reject");
  async function decide(kind) {
    const why = reason.value.trim();
    if (!why) { err.textContent = "A reason is required."; reason.focus(); return; }
    approve.disabled = reject.disabled = true;
    err.textContent = "";
    try {
      const o = await api("POST", `/v1/runs/${enc(run.id)}/approvals/${enc(ap.call)}/${kind}`, { reason: why });
      App.toast(`${kind === "approve" ? "Approved" : "Rejected"}: ${argvText(call)} → ${o.outcome}`);
      await App.route(true);
      const h = document.getElementById("pending-count"); if (h) h.focus();
    } catch (e) {
      err.textContent = `${e.code}: ${e.message}`;
      approve.disabled = reject.disabled = false;
    }
  }
  approve.addEventListener("click", () => decide("approve"));
  reject.addEventListener("click", () => decide("reject"));
  const spec = call ? call.spec : {};
  return el("article", { class: "card approval", "aria-labelledby": `${id}-title`, "data-call": ap.call, "data-run": run.id },
    el("h2", { id: `${id}-title`, class: "mono", text: argvText(call) }),
    kv([
      ["Asked by", askedBy(run, ap.call)],
      ["Requested", fmtTime(ap.requested_at_ms)],
      ["Run", el("a", { href: `#/run/${enc(run.id)}`, text: run.id })],
      ["Sandbox", run.sandbox ? el("a", { href: `#/sandbox/${enc(run.sandbox)}`, text: run.sandbox }) : ""],
      ["Tool input", el("code", { text: JSON.stringify(spec.argv) })],
      ["Working dir", spec.cwd || ""],
      ["Environment", (spec.env_names || []).join(", ")],
      ["Side effects", spec.side_effecting ? "yes" : "no"],
      ["Idempotency key", el("code", { text: call ? call.idempotency_key : "" })],
    ]),
    el("details", {}, el("summary", { text: `Run steps so far (${run.steps.length})` }), stepList(run, `Steps of ${run.id}`)),
    el("label", { for: reason.id, text: "Reason (required)" }), reason, err,
    el("div", { class: "actions" }, approve, reject));
}

// --------------------------------------------------------------------- runs
App.pages.runs = async function (view) {
  const runs = await api("GET", "/v1/runs");
  runs.sort((a, b) => b.updated_at_ms - a.updated_at_ms);
  view.append(el("h1", { text: "Runs" }),
    runs.length ? table(["Run", "Status", "Sandbox", "Steps", "Pending", "Updated"], runs.map((r) =>
      el("tr", { class: r.status === "failed" ? "bad" : r.pending_approvals ? "warn" : "" },
        el("td", {}, el("a", { href: `#/run/${enc(r.id)}`, class: "mono", text: r.id })),
        el("td", { text: r.status }),
        el("td", { class: "mono", text: r.sandbox || "" }),
        el("td", { text: r.steps }),
        el("td", { text: r.pending_approvals || "" }),
        el("td", { text: fmtTime(r.updated_at_ms) }))), "Runs")
      : el("p", { class: "muted", text: "No runs yet." }));
  return { live: true, sig: JSON.stringify(runs.map((r) => [r.id, r.updated_at_ms])) };
};

App.pages.run = async function (view, id) {
  const run = await api("GET", `/v1/runs/${enc(id)}`);
  const decisions = Object.fromEntries(run.approvals.filter((a) => a.decision).map((a) => [a.call, a.decision]));
  view.append(el("h1", { class: "mono", text: run.id }),
    kv([["Status", run.status], ["Sandbox", run.sandbox ? el("a", { href: `#/sandbox/${enc(run.sandbox)}`, text: run.sandbox }) : ""],
      ["Created", fmtTime(run.created_at_ms)], ["Updated", fmtTime(run.updated_at_ms)]]),
    el("h2", { text: "Tool calls" }),
    table(["Idempotency key", "Input", "State", "Exit", "Decision", "Output"], run.tool_calls.map((c) => {
      const d = decisions[c.id];
      const r = c.result || {};
      return el("tr", { class: ROW_KIND[CALL_KIND[c.state]] || "", "data-call": c.id, "data-state": c.state },
        el("td", { class: "mono", text: c.idempotency_key }),
        el("td", { class: "mono", text: argvText(c) }),
        el("td", {}, pill(stateOf(c.state), CALL_KIND[c.state])),
        el("td", { text: r.exit_code ?? "" }),
        el("td", {}, d ? `${d.approved ? "approved" : "rejected"} by ${d.by}: ${d.reason}` : ""),
        el("td", {}, r.stdout || r.stderr || c.error ? el("details", {}, el("summary", { text: "show" }),
          el("pre", { text: (r.stdout || "") + (r.stderr ? "\n[stderr]\n" + r.stderr : "") + (c.error ? "\n[error] " + c.error : "") })) : ""));
    }), "Tool calls"),
    el("h2", { text: "Steps" }), stepList(run, "Steps"));
  return { live: true, sig: JSON.stringify([run.status, run.updated_at_ms]) };
};

// ---------------------------------------------------------------- sandboxes
function countdown(deadline) {
  return el("span", { class: "countdown", "data-deadline": String(deadline) }, fmtDur(deadline - Date.now()));
}
function idleCell(s) {
  const lc = s.manifest.lifecycle || {};
  if (s.state === "paused" && s.expires_at_ms) return ["TTL ", countdown(s.expires_at_ms)];
  if (s.state === "running" && lc.idle_timeout_secs) return `idle timeout ${fmtDur(lc.idle_timeout_secs * 1000)} → ${lc.on_idle || "pause"}`;
  return "";
}
function resources(s) {
  const r = s.manifest.resources || {};
  return `${r.cpus} CPU · ${r.memory_mb} MiB · ${r.disk_mb} MiB disk`;
}
function ticker() {
  const t = setInterval(() => {
    for (const e of document.querySelectorAll(".countdown")) e.textContent = fmtDur(Number(e.dataset.deadline) - Date.now());
  }, 1000);
  return () => clearInterval(t);
}

App.pages.sandboxes = async function (view) {
  const list = await api("GET", "/v1/sandboxes");
  list.sort((a, b) => b.created_at_ms - a.created_at_ms);
  view.append(el("h1", { text: "Sandboxes" }),
    list.length ? table(["Sandbox", "State", "Backend", "Idle / TTL", "Resources", "Created"], list.map((s) =>
      el("tr", { class: s.state === "failed" ? "bad" : "", "data-id": s.id },
        el("td", {}, el("a", { href: `#/sandbox/${enc(s.id)}`, class: "mono", text: s.id })),
        el("td", {}, pill(s.state, s.state === "running" ? "ok" : s.state === "paused" ? "warn" : "")),
        el("td", { text: s.backend }),
        el("td", {}, idleCell(s)),
        el("td", { class: "hide-sm", text: resources(s) }),
        el("td", { class: "hide-sm", text: fmtTime(s.created_at_ms) }))), "Sandboxes")
      : el("p", { class: "muted", text: "No sandboxes." }));
  return { live: true, leave: ticker(), sig: JSON.stringify(list.map((s) => [s.id, s.state, s.expires_at_ms])) };
};

// The countdowns of one sandbox from /idle (when its policies next act).
function deadlineCell(d) {
  const parts = [];
  if (d.idle_deadline_ms) parts.push(el("span", {}, `${d.on_idle} in `, countdown(d.idle_deadline_ms), " without activity"));
  else if (d.state === "running") parts.push(`idle timeout ${fmtDur(d.idle_timeout_secs * 1000)} → ${d.on_idle}`);
  if (d.lifetime_deadline_ms) parts.push(el("span", {}, " · lifetime ends in ", countdown(d.lifetime_deadline_ms)));
  if (d.expires_at_ms) parts.push(el("span", {}, "destroyed (TTL) in ", countdown(d.expires_at_ms)));
  return el("span", { id: "deadlines" }, parts);
}

App.pages.sandbox = async function (view, id) {
  const base = `/v1/sandboxes/${enc(id)}`;
  const [s, d] = await Promise.all([api("GET", base), api("GET", `${base}/idle`)]);
  const msg = el("p", { class: "error", role: "alert" });
  function action(label, fn, cls) {
    const b = el("button", { type: "button", class: cls || "", "data-action": label.toLowerCase() }, label);
    b.addEventListener("click", async () => {
      b.disabled = true; msg.textContent = "";
      try { await fn(); await App.route(true); } catch (e) { msg.textContent = `${label} failed: ${e.code}: ${e.message}`; b.disabled = false; }
    });
    return b;
  }
  const acts = el("div", { class: "actions" });
  if (s.state === "running") {
    acts.append(action("Pause", async () => { await api("POST", `${base}/pause`, {}); App.toast(`Paused ${id}`); }));
  }
  if (s.state === "paused") {
    acts.append(action("Resume", async () => { await api("POST", `${base}/resume`, {}); App.toast(`Resumed ${id}`); }));
  }
  if (s.state === "running" || s.state === "paused") {
    acts.append(action("Snapshot", async () => {
      const snap = await api("POST", `${base}/snapshots`, {});
      App.toast(`Snapshot ${snap.id || ""} taken`);
    }));
    acts.append(action("Fork", async () => {
      const f = await api("POST", `${base}/fork`, { count: 1 });
      App.toast(`Forked: ${JSON.stringify(f).slice(0, 120)}`);
    }));
    if (s.state === "running") acts.append(el("a", { class: "button", href: `#/terminal/${enc(id)}`, text: "Terminal" }));
    acts.append(el("a", { class: "button", href: `${base}/outputs`, download: `${id}-outputs.tar`, text: "Collect outputs (tar)" }));
  }
  acts.append(action("Destroy", async () => {
    if (!window.confirm(`Destroy ${id}? This cannot be undone.`)) throw new App.ApiError(0, "cancelled", "not destroyed");
    await api("DELETE", base);
    location.hash = "#/sandboxes";
  }, "danger"));
  view.append(el("h1", { class: "mono", text: s.id }),
    el("div", { class: "card" }, kv([
      ["State", pill(s.state, s.state === "running" ? "ok" : s.state === "paused" ? "warn" : "")],
      ["Reason", s.reason], ["Backend", s.backend], ["Resources", resources(s)],
      ["Idle / TTL", deadlineCell(d)], ["Running time", fmtDur(s.running_ms)],
      ["Created", fmtTime(s.created_at_ms)], ["Paused at", fmtTime(s.paused_at_ms)],
      ["Pause kind", s.pause_kind], ["Source snapshot", s.source_snapshot],
      ["Manifest digest", el("code", { text: s.manifest_digest })], ["Node", s.node],
    ]), acts, msg));
  if (s.state === "running") view.append(await fileBrowser(base, "/"));
  return { live: true, leave: ticker(), sig: JSON.stringify([s.state, s.paused_at_ms, s.expires_at_ms, s.reason]) };
};

async function fileBrowser(base, start) {
  const box = el("section", { class: "card", "aria-labelledby": "files-title" });
  const pathIn = el("input", { id: "files-path", type: "text", value: start });
  const err = el("p", { class: "error", role: "alert" });
  const listing = el("div", { id: "files-list" });
  async function show(dir) {
    err.textContent = "";
    pathIn.value = dir;
    try {
      const entries = await api("GET", `${base}/files/list?path=${enc(dir)}`);
      entries.sort((a, b) => (a.kind === "dir" ? 0 : 1) - (b.kind === "dir" ? 0 : 1) || a.name.localeCompare(b.name));
      const join = (n) => (dir.endsWith("/") ? dir : dir + "/") + n;
      const rows = [];
      if (dir !== "/") {
        const up = dir.replace(/\/+$/, "").replace(/\/[^/]*$/, "") || "/";
        rows.push(el("tr", {}, el("td", {}, el("button", { type: "button", onclick: () => show(up) }, "..")), el("td"), el("td"), el("td")));
      }
      for (const e of entries) {
        const p = join(e.name);
        rows.push(el("tr", { "data-name": e.name },
          el("td", {}, e.kind === "dir" ? el("button", { type: "button", class: "dir", onclick: () => show(p) }, e.name + "/") : el("span", { class: "mono", text: e.name })),
          el("td", { text: e.kind === "dir" ? "" : fmtBytes(e.size) }),
          el("td", { class: "hide-sm", text: e.mtime ? fmtTime(e.mtime * 1000) : "" }),
          el("td", {}, e.kind === "file" ? el("a", { href: `${base}/files?path=${enc(p)}`, download: e.name, class: "download", "aria-label": `Download ${e.name}` }, "Download") : "")));
      }
      listing.replaceChildren(table(["Name", "Size", "Modified", ""], rows, `Files in ${dir}`));
    } catch (e) { err.textContent = `${e.code}: ${e.message}`; }
  }
  const form = el("form", { class: "filters" },
    el("div", {}, el("label", { for: "files-path", text: "Directory" }), pathIn),
    el("div", {}, el("button", { type: "submit" }, "Open")));
  form.addEventListener("submit", (ev) => { ev.preventDefault(); show(pathIn.value || "/"); });
  box.append(el("h2", { id: "files-title", text: "Files" }), form, err, listing);
  await show(start);
  return box;
}

// ---------------------------------------------------------------- snapshots
App.pages.snapshots = async function (view) {
  const list = await api("GET", "/v1/snapshots");
  list.sort((a, b) => b.created_at_ms - a.created_at_ms);
  const msg = el("p", { class: "error", role: "alert" });
  function act(label, snap, fn, cls) {
    const b = el("button", { type: "button", class: cls || "", "data-action": label.toLowerCase(), "aria-label": `${label} ${snap.id}` }, label);
    b.addEventListener("click", async () => {
      b.disabled = true; msg.textContent = "";
      try { await fn(); } catch (e) { msg.textContent = `${label} failed: ${e.code}: ${e.message}`; b.disabled = false; }
    });
    return b;
  }
  view.append(el("h1", { text: "Snapshots" }), msg,
    list.length ? table(["Snapshot", "Kind", "Source", "Raw", "Stored", "Manifest digest", "Created", "Expires", ""], list.map((s) =>
      el("tr", { "data-id": s.id },
        el("td", { class: "mono", text: s.id }),
        el("td", { text: s.kind }),
        el("td", { class: "mono", text: s.source_sandbox || "" }),
        el("td", { text: fmtBytes(s.raw_bytes) }),
        el("td", { text: fmtBytes(s.stored_bytes) }),
        el("td", { class: "mono hide-sm", title: s.manifest_digest, text: (s.manifest_digest || "").slice(0, 16) + "…" }),
        el("td", { class: "hide-sm", text: fmtTime(s.created_at_ms) }),
        el("td", {}, s.expires_at_ms ? countdown(s.expires_at_ms) : "never"),
        el("td", {}, el("div", { class: "actions" },
          act("Restore", s, async () => {
            const sb = await api("POST", `/v1/snapshots/${enc(s.id)}/restore`, {});
            App.toast(`Restored into ${sb.id}`);
            location.hash = `#/sandbox/${enc(sb.id)}`;
          }),
          act("Delete", s, async () => {
            if (!window.confirm(`Delete snapshot ${s.id}?`)) throw new App.ApiError(0, "cancelled", "not deleted");
            await api("DELETE", `/v1/snapshots/${enc(s.id)}`);
            await App.route(true);
          }, "danger"))))), "Snapshots")
      : el("p", { class: "muted", text: "No snapshots." }));
  return { live: true, leave: ticker(), sig: JSON.stringify(list.map((s) => [s.id, s.expires_at_ms])) };
};

// -------------------------------------------------------------------- audit
App.pages.audit = async function (view) {
  const verify = await api("GET", "/ui/audit-verify");
  const banner = el("p", { id: "audit-verify", role: "status" },
    verify.ok ? pill("hash chain verified intact", "ok") : pill(`hash chain BROKEN${verify.broken_at ? " at " + verify.broken_at : ""}`, "bad"),
    verify.entries !== undefined ? ` ${verify.entries} entries checked` : "", verify.problem ? ` · ${verify.problem}` : "");
  view.append(el("h1", { text: "Audit" }), banner);
  if (App.session.admin) {
    view.append(el("p", { class: "muted", text: "An admin session verifies the chain; each tenant's entries are read with that tenant's session." }));
    return { live: false };
  }
  const entries = (await api("GET", "/v1/audit?limit=2000")).reverse();
  const f = { action: el("select", { id: "f-action" }, el("option", { value: "", text: "any" }),
    [...new Set(entries.map((e) => e.action))].sort().map((a) => el("option", { value: a, text: a }))),
  target: el("input", { id: "f-target", type: "search" }), actor: el("input", { id: "f-actor", type: "search" }) };
  const kept = App.auditFilter || {};
  for (const [k, e] of Object.entries(f)) if (kept[k]) e.value = kept[k];
  const body = el("tbody");
  const count = el("p", { class: "muted", role: "status" });
  function render() {
    const a = f.action.value, t = f.target.value.trim(), who = f.actor.value.trim();
    App.auditFilter = { action: a, target: t, actor: who };
    const rows = entries.filter((e) => (!a || e.action === a) && (!t || e.target.includes(t)) && (!who || e.actor.includes(who)));
    count.textContent = `${rows.length} of ${entries.length} entries`;
    body.replaceChildren(...rows.slice(0, 500).map((e) => el("tr", { class: /reject|denied|refused|fail/.test(e.action + JSON.stringify(e.detail)) ? "bad" : "" },
      el("td", { text: e.seq }), el("td", { text: fmtTime(e.ts_ms) }), el("td", { text: e.actor }),
      el("td", { text: e.action }), el("td", { class: "mono", text: e.target }),
      el("td", { class: "mono hide-sm", text: JSON.stringify(e.detail).slice(0, 160) }))));
  }
  for (const k of Object.values(f)) k.addEventListener("input", render);
  view.append(el("form", { class: "filters", role: "search", onsubmit: (e) => e.preventDefault() },
    el("div", {}, el("label", { for: "f-action", text: "Action" }), f.action),
    el("div", {}, el("label", { for: "f-target", text: "Target contains" }), f.target),
    el("div", {}, el("label", { for: "f-actor", text: "Actor contains" }), f.actor)),
    count,
    el("div", { class: "table-wrap" }, el("table", { "aria-label": "Audit entries" },
      el("thead", {}, el("tr", {}, ["#", "Time", "Actor", "Action", "Target", "Detail"].map((h) => el("th", { scope: "col", text: h })))), body)));
  render();
  return { live: true, sig: String(entries.length ? entries[0].seq : 0) };
};

// -------------------------------------------------------------------- admin
App.pages.admin = async function (view) {
  if (!App.session.admin) throw new App.ApiError(403, "forbidden", "the admin pages need an admin session");
  const [tenants, verify] = await Promise.all([api("GET", "/v1/admin/tenants"), api("GET", "/ui/audit-verify")]);
  view.append(el("h1", { text: "Admin" }),
    el("p", {}, verify.ok ? pill("audit chain intact", "ok") : pill("audit chain broken", "bad"), ` ${verify.entries} entries`),
    el("h2", { text: "Tenants" }),
    table(["Tenant", "Name", "Created"], tenants.map((t) => el("tr", {},
      el("td", { class: "mono", text: t.id }), el("td", { text: t.name }), el("td", { text: fmtTime(t.created_at_ms) }))), "Tenants"));
  return {};
};
})();
