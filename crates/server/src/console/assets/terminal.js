// A line terminal onto a sandbox session over the daemon's attach
// WebSocket (the session cookie authenticates it; the daemon refuses
// another origin). Output is shown as text with terminal escapes removed.
"use strict";
(function () {
const { el, api } = App;
const enc = encodeURIComponent;
// CSI/OSC sequences and lone escapes.
const ANSI = /\x1b\[[0-9;?]*[ -\/]*[@-~]|\x1b\][^\x07\x1b]*(\x07|\x1b\\)|\x1b[()][0-9A-B]|\x1b[=>78]|\r(?!\n)/g;

App.pages.terminal = async function (view, id) {
  if (!id) {
    const list = (await api("GET", "/v1/sandboxes")).filter((s) => s.state === "running");
    view.append(el("h1", { text: "Terminal" }),
      list.length ? el("ul", {}, list.map((s) => el("li", {}, el("a", { href: `#/terminal/${enc(s.id)}`, class: "mono", text: s.id }))))
        : el("p", { class: "muted", text: "No running sandbox." }));
    return {};
  }
  const base = `/v1/sandboxes/${enc(id)}`;
  const session = await api("POST", `${base}/sessions`, { argv: ["/bin/sh", "-i"], pty: { cols: 100, rows: 30 } });
  const out = el("pre", { class: "term", id: "term-out", "aria-live": "polite", "aria-label": "Terminal output", tabindex: "0" });
  const line = el("input", { id: "term-line", type: "text", autocomplete: "off", spellcheck: "false" });
  const status = el("p", { class: "muted", role: "status", text: "connecting…" });
  const dec = new TextDecoder();
  let ws = null, closed = false;
  function write(t) {
    out.textContent += t.replace(ANSI, "");
    if (out.textContent.length > 200000) out.textContent = out.textContent.slice(-150000);
    out.scrollTop = out.scrollHeight;
  }
  function connect(offset) {
    const proto = location.protocol === "https:" ? "wss:" : "ws:";
    ws = new WebSocket(`${proto}//${location.host}${base}/sessions/${enc(session.id)}/attach?offset=${offset || 0}`);
    ws.binaryType = "arraybuffer";
    ws.onmessage = (m) => {
      if (typeof m.data !== "string") { write(dec.decode(new Uint8Array(m.data), { stream: true })); return; }
      let c = {}; try { c = JSON.parse(m.data); } catch (_) { return; }
      if (c.type === "attached") status.textContent = `attached to ${session.id}`;
      else if (c.type === "exit") status.textContent = `session ended (exit ${c.code})`;
      else if (c.type === "detached") status.textContent = `detached: ${c.reason} (the sandbox paused)`;
      else if (c.type === "error") status.textContent = `error: ${c.message}`;
    };
    ws.onclose = () => { if (!closed && !/ended|detached/.test(status.textContent)) status.textContent = "disconnected"; };
  }
  function send(data) {
    if (ws && ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify({ type: "input", data }));
  }
  const form = el("form", { class: "termform" },
    el("div", {}, el("label", { for: "term-line", text: "Command (Enter sends it)" }), line),
    el("div", { class: "actions" }, el("button", { type: "submit" }, "Send"),
      el("button", { type: "button", onclick: () => send("\x03") }, "Ctrl-C")));
  form.addEventListener("submit", (ev) => { ev.preventDefault(); send(line.value + "\n"); line.value = ""; });
  view.append(el("h1", {}, "Terminal ", el("span", { class: "mono", text: id })), status, out, form);
  connect(0);
  setTimeout(() => line.focus(), 0);
  return {
    leave() {
      closed = true;
      if (ws) ws.close();
      api("DELETE", `${base}/sessions/${enc(session.id)}`).catch(() => {});
    },
  };
};
})();
