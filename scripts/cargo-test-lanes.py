#!/usr/bin/env python3
"""Run the workspace's cargo tests in two lanes at once.

    scripts/cargo-test-lanes.py LOG_DIR

`cargo test` runs its test binaries one after another. On the CI machine (two
cores) the binaries that boot microVMs under TCG keep both cores busy, while
most of the others spend their time waiting on sandboxes (idle windows, pauses,
daemon restarts). So the binaries are built once (`cargo test --no-run`) and
run directly, as cargo would (each in its package's directory), in two lanes:

  microvm  the binaries that boot guests, longest first, two tests at a time;
  others   every other binary (and the doc tests), one test at a time, so
           that the two lanes together stay near two busy cores.

Each lane writes its own log (LOG_DIR/microvm.log, LOG_DIR/others.log) in the
format `cargo test` prints (`Running ...`, `test result: ...`), so the
summary of scripts/test.sh reads them unchanged; both are printed to stdout
once the lanes are done. A binary that exits non-zero without a `test
result:` line (it crashed or was killed) gets one written for it, counting
one failure. Exit status: 0 when every binary passed, 101 otherwise.

A lane that is still running after STASIS_TEST_TIMEOUT (default 50m) is
killed with its test binary, whose name ends the lane's log, and the run
fails with 124 (no `test result:` line is made up for it: the caller counts
the hang from the status).
"""

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

# (package, test target) of the binaries that boot microVMs, longest first
# (measured: the resume-correctness matrix takes ~4 min, the rest 0.5-2),
# with the two lanes' sums near each other (~14 min each on the CI machine,
# the other lane's doc tests included).
MICROVM = [
    ("stasis-cli", "resume_correctness"),
    ("stasis-cli", "load"),
    ("stasis-backend-microvm", "vm"),
    ("stasis-cli", "pause_crash"),
    ("stasis-backend-microvm", "boundaries"),
    ("stasis-backend-microvm", "net"),
    ("stasis-cli", "boundaries_microvm"),
    ("stasis-cli", "microvm_terminal"),
    ("stasis-cli", "microvm_e2e"),
    ("stasis-backend-microvm", "files"),
    ("stasis-guest-agent", "vm"),
    ("stasis-backend-microvm", "pty"),
    ("stasis-backend-microvm", "fork_bench"),
    ("stasis-backend-microvm", "local_cap"),
    ("stasis-cli", "standby"),
]
# Binaries of the other lane known to be long, run first so the lane ends
# near the microVM one.
OTHERS_FIRST = ["multinode", "code_interpreter", "network_egress", "boundaries", "manager"]


def parse_duration(s: str) -> float:
    units = {"s": 1, "m": 60, "h": 3600}
    if s and s[-1] in units:
        return float(s[:-1]) * units[s[-1]]
    return float(s)


def test_binaries(repo: Path):
    """Build (or find built) every test binary: (package, target, kind, path, dir)."""
    out = subprocess.run(
        ["cargo", "test", "--locked", "--workspace", "--no-run", "--message-format=json"],
        cwd=repo,
        stdout=subprocess.PIPE,
        check=True,
        text=True,
    ).stdout
    bins = []
    for line in out.splitlines():
        try:
            msg = json.loads(line)
        except json.JSONDecodeError:
            continue
        if msg.get("reason") != "compiler-artifact" or not msg.get("executable"):
            continue
        if not msg.get("profile", {}).get("test"):
            continue
        pkg = msg["package_id"]
        # package_id: "path+file:///…/crates/cli#stasis-cli@0.1.0" or
        # "path+file:///…/crates/cli#0.1.0" when the dir names the package.
        manifest = Path(msg["manifest_path"])
        name = pkg.split("#")[-1].split("@")[0] if "@" in pkg.split("#")[-1] else manifest.parent.name
        target = msg["target"]
        kind = "unittests" if "lib" in target["kind"] or "bin" in target["kind"] else "tests"
        bins.append((name, target["name"], kind, msg["executable"], str(manifest.parent)))
    return bins


class Lane(threading.Thread):
    def __init__(self, name, jobs, log_path, deadline):
        super().__init__(name=name)
        self.jobs = jobs
        self.log_path = log_path
        self.deadline = deadline
        self.failed = False
        self.hung = False
        self.proc = None

    def run(self):
        with open(self.log_path, "w") as log:
            for label, argv, cwd in self.jobs:
                log.write(f"     Running {label}\n")
                log.flush()
                t0 = time.monotonic()
                env = dict(os.environ, CARGO_MANIFEST_DIR=cwd)
                self.proc = subprocess.Popen(
                    argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
                summary = False
                for raw in self.proc.stdout:
                    line = raw.decode("utf-8", "replace")
                    summary = summary or line.startswith("test result:")
                    log.write(line)
                    log.flush()
                rc = self.proc.wait()
                secs = time.monotonic() - t0
                log.write(f"lane {self.name}: {label} exited {rc} after {secs:.0f} s\n")
                if self.hung:
                    # Counted once, by the caller, from the exit status 124.
                    log.write(f"lane {self.name}: killed at the time limit while running {label}\n")
                    return
                if rc != 0:
                    self.failed = True
                    if not summary:
                        log.write(f"test result: FAILED. 0 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out; {label} exited {rc} without a summary\n")
                log.flush()

    def kill(self):
        self.hung = True
        p = self.proc
        if p and p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def main():
    if len(sys.argv) != 2:
        print("usage: cargo-test-lanes.py LOG_DIR", file=sys.stderr)
        return 2
    repo = Path(__file__).resolve().parent.parent
    logs = Path(sys.argv[1])
    logs.mkdir(parents=True, exist_ok=True)
    limit = parse_duration(os.environ.get("STASIS_TEST_TIMEOUT", "50m"))
    bins = test_binaries(repo)
    heavy_rank = {key: i for i, key in enumerate(MICROVM)}
    heavy, others = [], []
    for pkg, target, kind, exe, cwd in bins:
        rel = os.path.relpath(exe, repo)
        label = f"{kind}/{target} ({rel}) [{pkg}]" if kind == "tests" else f"unittests {target} ({rel}) [{pkg}]"
        if kind == "tests" and (pkg, target) in heavy_rank:
            heavy.append((heavy_rank[(pkg, target)], label, [exe], cwd))
        else:
            first = OTHERS_FIRST.index(target) if kind == "tests" and target in OTHERS_FIRST else len(OTHERS_FIRST)
            others.append((first, label, [exe, "--test-threads=1"], cwd))
    heavy.sort(key=lambda j: j[0])
    others.sort(key=lambda j: j[0])
    jobs_heavy = [(label, argv, cwd) for _, label, argv, cwd in heavy]
    jobs_others = [(label, argv, cwd) for _, label, argv, cwd in others]
    # The doc tests go through cargo (rustdoc compiles them); they end the lane.
    jobs_others.append(("doc tests (cargo test --doc)",
                        ["cargo", "test", "--locked", "--workspace", "--doc"], str(repo)))
    lanes = [
        Lane("microvm", jobs_heavy, logs / "microvm.log", limit),
        Lane("others", jobs_others, logs / "others.log", limit),
    ]
    t0 = time.monotonic()
    for lane in lanes:
        lane.start()
    for lane in lanes:
        lane.join(max(0.0, limit - (time.monotonic() - t0)))
    hung = False
    for lane in lanes:
        if lane.is_alive():
            hung = True
            lane.kill()
            lane.join(60)
    for lane in lanes:
        sys.stdout.write(Path(lane.log_path).read_text(errors="replace"))
    print(f"cargo-test-lanes: done in {time.monotonic() - t0:.0f} s", file=sys.stderr)
    if hung:
        return 124
    return 101 if any(lane.failed for lane in lanes) else 0


if __name__ == "__main__":
    sys.exit(main())
