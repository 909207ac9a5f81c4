"""Create-to-first-command and connect-after-pause, through the unmodified
E2B SDK and through stasis's own Python client, in one run against one
daemon (the harness of ``clients/python/tests``), medians of ``--runs``.

    .venv/bin/python clients/e2b/python/bench_switch.py [--runs 5] [--backend process|microvm]

A measurement, not a test: it prints figures and asserts nothing about them.
Both sides run the same image (the E2B ``base`` template's) and the same
command; "connect after pause" is the explicit resume plus the first
command after it (E2B: ``Sandbox.connect`` then ``commands.run``; stasis:
``exec`` on the paused sandbox, which resumes it transparently).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location(
    "stasis_client_tests_harness", HERE.parents[1] / "python" / "tests" / "conftest.py"
)
assert _spec is not None and _spec.loader is not None
harness = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(harness)


def ms(t0: float) -> float:
    return (time.perf_counter() - t0) * 1000


def e2b_round(Sandbox) -> tuple[float, float]:
    t0 = time.perf_counter()
    sbx = Sandbox.create("base", timeout=600)
    sbx.commands.run("true")
    create = ms(t0)
    sbx.pause()
    t0 = time.perf_counter()
    again = Sandbox.connect(sbx.sandbox_id)
    again.commands.run("true")
    resume = ms(t0)
    again.kill()
    return create, resume


def stasis_round(client, manifest: dict) -> tuple[float, float]:
    t0 = time.perf_counter()
    sbx = client.create(manifest)
    sbx.exec(["true"])
    create = ms(t0)
    sbx.pause()
    t0 = time.perf_counter()
    sbx.exec(["true"])
    resume = ms(t0)
    sbx.destroy()
    return create, resume


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--backend", default=os.environ.get("STASIS_E2B_BACKEND", "process"))
    a = ap.parse_args()
    if a.backend == "microvm":
        os.environ["STASIS_DEFAULT_BACKEND"] = "microvm"
    for d in harness.running_daemon():
        token = (d.dir / "token").read_text().strip()
        os.environ.update(
            E2B_API_URL=f"{d.url}/e2b",
            E2B_SANDBOX_URL=f"{d.url}/e2b",
            E2B_API_KEY="e2b_" + token.encode().hex(),
        )
        from e2b import Sandbox
        from stasis_client import Client

        with Client(**d.connect_kwargs()) as client:
            # The stasis side runs what E2B's `base` resolves to.
            probe = Sandbox.create("base")
            image = client.get(probe.sandbox_id).info.manifest.get("image")
            probe.kill()
            manifest = {"backend": a.backend, "lifecycle": {"on_idle": "nothing"}}
            if image:
                manifest["image"] = image
            rows = {"e2b": [], "stasis": []}
            for _ in range(a.runs):
                rows["e2b"].append(e2b_round(Sandbox))
                rows["stasis"].append(stasis_round(client, manifest))
        print(f"backend {a.backend}, image {image or 'default root'}, median of {a.runs} runs (ms):")
        print(f"{'client':8} {'create->first command':>22} {'connect after pause':>20}")
        for name, r in rows.items():
            c = statistics.median(x[0] for x in r)
            p = statistics.median(x[1] for x in r)
            print(f"{name:8} {c:22.0f} {p:20.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
