// Metrics drawn as inline SVG from the daemon's Prometheus text (/metrics):
// pause and resume latency histograms, sandboxes by state with the idle
// ratio, snapshot storage per tenant (raw and stored) and resume paths.
"use strict";
(function () {
const { el, svg, fmtBytes } = App;

function parse(text) {
  const out = [];
  for (const line of text.split("\n")) {
    if (!line || line[0] === "#") continue;
    const m = line.match(/^([a-zA-Z_:][\w:]*)(\{(.*)\})?\s+(\S+)/);
    if (!m) continue;
    const labels = {};
    if (m[3]) for (const p of m[3].matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) labels[p[1]] = p[2];
    out.push({ name: m[1], labels, value: Number(m[4]) });
  }
  return out;
}

// A bar chart: items [{label, value}], values formatted by fmt.
function bars(title, items, fmt) {
  const W = 520, rowH = 24, left = 150, H = Math.max(1, items.length) * rowH + 30;
  const max = Math.max(1e-9, ...items.map((i) => i.value));
  const g = svg("svg", { viewBox: `0 0 ${W} ${H}`, class: "chart", role: "img", "aria-label": title });
  g.append(svg("title", { text: title }));
  items.forEach((it, i) => {
    const y = 10 + i * rowH, w = Math.max(0, (W - left - 90) * it.value / max);
    g.append(svg("text", { x: 4, y: y + 15, text: it.label }),
      svg("rect", { x: left, y: y + 3, width: w.toFixed(1), height: rowH - 8, fill: it.color || "#1f4e79", rx: 2 }),
      svg("text", { x: left + w + 6, y: y + 15, text: fmt ? fmt(it.value) : String(it.value) }));
  });
  if (!items.length) g.append(svg("text", { x: 4, y: 20, text: "no data yet" }));
  return g;
}

// Non-cumulative counts per bucket of one histogram, summed over the other labels.
function histogram(samples, name, match) {
  const by = new Map();
  for (const s of samples) {
    if (s.name !== name + "_bucket" || !match(s.labels)) continue;
    const le = s.labels.le;
    by.set(le, (by.get(le) || 0) + s.value);
  }
  const les = [...by.keys()].sort((a, b) => (a === "+Inf" ? Infinity : Number(a)) - (b === "+Inf" ? Infinity : Number(b)));
  let prev = 0;
  return les.map((le) => { const c = by.get(le); const v = c - prev; prev = c; return { label: le === "+Inf" ? "> last" : `≤ ${le} s`, value: v }; });
}

function card(title, ...kids) {
  return el("section", { class: "card", "aria-label": title }, el("h2", { text: title }), ...kids);
}

async function draw(view) {
  const r = await fetch("/metrics", { credentials: "same-origin" });
  const samples = parse(await r.text());
  const sum = (name, f) => samples.filter((s) => s.name === name && (!f || f(s.labels))).reduce((a, s) => a + s.value, 0);
  const tenant = App.session && App.session.tenant;
  const mine = (l) => App.session.admin || !l.tenant || l.tenant === tenant;
  const parts = [el("h1", { text: "Metrics" })];
  for (const op of ["pause", "resume"]) {
    const h = histogram(samples, "stasis_lifecycle_duration_seconds", (l) => l.op === op && l.outcome === "ok");
    const n = sum("stasis_lifecycle_duration_seconds_count", (l) => l.op === op && l.outcome === "ok");
    const total = sum("stasis_lifecycle_duration_seconds_sum", (l) => l.op === op && l.outcome === "ok");
    parts.push(card(`${op[0].toUpperCase() + op.slice(1)} latency`,
      el("p", { class: "muted", text: n ? `${n} ${op}s, mean ${(1000 * total / n).toFixed(1)} ms` : `no ${op} yet` }),
      bars(`${op} latency histogram`, h.filter((b) => b.value > 0 || n === 0))));
  }
  const states = {};
  for (const s of samples) if (s.name === "stasis_sandboxes") states[s.labels.state] = (states[s.labels.state] || 0) + s.value;
  const running = states.running || 0, paused = states.paused || 0;
  const ratio = running + paused ? paused / (running + paused) : 0;
  parts.push(card("Sandboxes by state (daemon)",
    el("p", { id: "idle-ratio", text: `Idle ratio (paused / live): ${(100 * ratio).toFixed(0)} %` }),
    bars("sandboxes by state", Object.entries(states).map(([k, v]) => ({ label: k, value: v })))));
  const storage = [];
  let raw = 0, stored = 0;
  for (const s of samples) {
    if (s.name !== "stasis_snapshot_bytes" || !mine(s.labels)) continue;
    storage.push({ label: `${s.labels.tenant} ${s.labels.kind}`, value: s.value, color: s.labels.kind === "raw" ? "#8c959f" : "#1f4e79" });
    if (s.labels.kind === "raw") raw += s.value; else stored += s.value;
  }
  parts.push(card("Snapshot storage per tenant",
    el("p", { text: raw ? `Stored / raw: ${(100 * stored / raw).toFixed(0)} % (what deduplication and compression leave to pay for)` : "no snapshots yet" }),
    bars("snapshot bytes per tenant", storage, fmtBytes)));
  const paths = samples.filter((s) => s.name === "stasis_resumes_total").map((s) => ({ label: s.labels.path, value: s.value }));
  parts.push(card("Resumes by path", bars("resumes by path", paths)));
  view.replaceChildren(...parts);
}

App.pages.metrics = async function (view) {
  await draw(view);
  const t = setInterval(() => draw(view).catch(() => {}), 5000);
  return { leave: () => clearInterval(t) };
};
})();
