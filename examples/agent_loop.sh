#!/usr/bin/env bash
# A scripted "agent" (no model: the script decides its steps) that needs a
# human approval "overnight" (seconds here), survives a daemon restart in the
# middle, and resumes without repeating its side effect.
#
#   examples/agent_loop.sh            # uses `stasis` from PATH
#   STASIS_BIN=target/debug/stasis examples/agent_loop.sh
#
# What happens:
#  1. a daemon starts on a temporary data dir; a sandbox with a 2 s idle window;
#  2. the agent opens a run, records a model step, and asks for a side-effecting
#     tool call ("send the report": appends to /workspace/outbox) that requires
#     approval -> 202, the run waits; the agent stores the signed RunState
#     document and goes away;
#  3. nobody touches the sandbox: it auto-pauses (compute freed);
#  4. the daemon is killed with SIGKILL and restarted ("overnight");
#  5. a human approves: `stasis approve RUN send-report --reason ...`; the
#     call runs once, the paused sandbox resumes transparently;
#  6. the agent wakes up, posts its stored document back (verified: HMAC,
#     tenant, pending approvals, sandbox), and replays its step with the same
#     idempotency key: stasis returns the recorded result, nothing runs again;
#  7. the outbox holds exactly one line; the run completes; the audit log is
#     verified.
set -euo pipefail

BIN=${STASIS_BIN:-stasis}
dir=$(mktemp -d /tmp/stasis-agent-loop.XXXXXX)
cg="stasis-agent-loop-$$"
daemon=""
sb=""

say() { printf '\n== %s\n' "$*"; }
# field JSON-PATH: read JSON on stdin, print one field (a.b.0.c).
field() {
    python3 -c '
import json, sys
v = json.load(sys.stdin)
for k in sys.argv[1].split("."):
    v = v[int(k)] if isinstance(v, list) else v[k]
print(v if isinstance(v, str) else json.dumps(v))' "$1"
}

start_daemon() {
    rm -f "$dir/ready"
    "$BIN" serve --data-dir "$dir" --listen 127.0.0.1:0 --insecure-dev-key \
        --ready-file "$dir/ready" --cgroup-parent "$cg" >>"$dir/daemon.log" 2>&1 &
    daemon=$!
    for _ in $(seq 1 600); do
        [ -s "$dir/ready" ] && break
        sleep 0.1
    done
    [ -s "$dir/ready" ] || { echo "daemon did not start:"; tail "$dir/daemon.log"; exit 1; }
    STASIS_URL="http://$(cat "$dir/ready")"
    # The CLI reads its API token from <data dir>/token (written at first start).
    STASIS_DATA_DIR="$dir"
    export STASIS_URL STASIS_DATA_DIR
}

cleanup() {
    if [ -n "$sb" ] && [ -n "$daemon" ]; then "$BIN" rm "$sb" >/dev/null 2>&1 || true; fi
    if [ -n "$daemon" ]; then kill "$daemon" 2>/dev/null || true; wait "$daemon" 2>/dev/null || true; fi
    rm -rf "$dir"
}
trap cleanup EXIT

# The agent's one side-effecting step. It is safe to call again after any
# crash or restart: the idempotency key makes stasis run it at most once.
send_report() {
    STASIS_ACTOR=agent "$BIN" --json runs call "$run" --key send-report \
        --side-effecting --requires-approval -- \
        sh -c 'echo "report sent at $(date +%s)" >> /workspace/outbox; wc -l < /workspace/outbox'
}

say "daemon and sandbox"
start_daemon
sb=$("$BIN" create --backend process --idle-secs 2 --on-idle pause)
echo "sandbox $sb"

say "agent: open a run, think, ask to send the report (needs approval)"
run=$(STASIS_ACTOR=agent "$BIN" runs create --sandbox "$sb")
echo "run $run"
STASIS_ACTOR=agent "$BIN" runs step "$run" --kind model_step \
    --data '{"thought": "the report is ready; sending it needs a human OK"}' >/dev/null
out=$(send_report)
echo "tool call: $(echo "$out" | field outcome) (run $(echo "$out" | field run.status))"
"$BIN" runs state "$run" > "$dir/agent-state.json"
echo "agent stored its RunState document ($(wc -c < "$dir/agent-state.json") bytes) and sleeps"

say "waiting: the sandbox idles and auto-pauses"
for _ in $(seq 1 100); do
    st=$("$BIN" --json get "$sb" | field state)
    [ "$st" = paused ] && break
    sleep 0.2
done
echo "sandbox is $st"

say "overnight: the daemon is killed (SIGKILL) and restarted"
kill -9 "$daemon"; wait "$daemon" 2>/dev/null || true
start_daemon
echo "run is $("$BIN" --json runs get "$run" | field status)"

say "a human approves"
STASIS_ACTOR=alice "$BIN" approve "$run" send-report --reason "numbers checked"
echo "sandbox is $("$BIN" --json get "$sb" | field state) (resumed transparently)"

say "agent wakes up: verify its stored state, replay its step"
rep=$("$BIN" --json runs resume "$dir/agent-state.json")
echo "document verified; approvals decided since it was stored: $(echo "$rep" | field decided_since)"
out=$(send_report)
echo "tool call: $(echo "$out" | field outcome), replayed=$(echo "$out" | field replayed) (recorded result: $(echo "$out" | field call.result.stdout) line(s) in the outbox)"
STASIS_ACTOR=agent "$BIN" runs step "$run" --kind completed >/dev/null

say "result"
lines=$("$BIN" exec "$sb" -- sh -c 'wc -l < /workspace/outbox')
echo "outbox has $lines line(s)"
"$BIN" runs get "$run"
"$BIN" audit ls --sandbox "$run"
"$BIN" audit verify
if [ "$lines" != 1 ]; then
    echo "FAIL: the side effect ran $lines times"
    exit 1
fi
echo "OK: approved after a restart, sent exactly once"
