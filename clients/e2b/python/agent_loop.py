"""An agent loop written for E2B, run unmodified against stasis.

What an agent does with E2B's code interpreter, in the order it does it:
create a sandbox whose egress is an allowlist (PyPI only), install a package
with pip through it, upload a CSV, analyse and plot it with the kernel,
pause while it waits for its user, come back an hour later to the same
kernel (its variables intact), and kill the sandbox when done.

Nothing here names stasis: the E2B environment does (README, "E2B SDK"):

    export E2B_API_URL="$STASIS_URL/e2b" E2B_SANDBOX_URL="$STASIS_URL/e2b"
    export E2B_API_KEY="e2b_$(printf %s "$STASIS_TOKEN" | od -An -tx1 | tr -d ' \\n')"
    python clients/e2b/python/agent_loop.py            # waits the hour for real
    python clients/e2b/python/agent_loop.py --simulate # the hour passes on a simulated clock

The clock is the loop's only parameter (`run(sleep=...)`): the tests pass a
simulated one, so "an hour later" costs no time, and the sandbox spends it
paused as it would for real (stasis keeps a paused sandbox for its paused
TTL, 7 days by default, in the encrypted snapshot store).
"""

from __future__ import annotations

import base64
import sys
import time
from typing import Callable, Dict

from e2b_code_interpreter import Sandbox

IDLE_SECONDS = 3600
PACKAGE = "tabulate==0.9.0"
CSV = "city,month,rain_mm\n" + "".join(
    f"{c},{m},{r}\n"
    for c, base in (("Lisbon", 20), ("Bergen", 190))
    for m, r in enumerate((base + 5 * i for i in range(12)), start=1)
)


def run(sleep: Callable[[float], None] = time.sleep, log=print) -> Dict[str, object]:
    """One agent session; returns what it observed (for the tests)."""
    seen: Dict[str, object] = {}
    sbx = Sandbox.create(
        timeout=600,
        # Egress: PyPI only, everything else refused.
        network={"allow_out": ["pypi.org", "files.pythonhosted.org"], "deny_out": ["0.0.0.0/0"]},
        # If the agent forgot to pause, the timeout would pause rather than kill.
        lifecycle={"on_timeout": "pause"},
        metadata={"agent": "rainfall"},
    )
    sandbox_id = sbx.sandbox_id
    log(f"sandbox {sandbox_id}")
    try:
        pip = sbx.commands.run(f"pip install --no-cache-dir {PACKAGE}", timeout=300)
        seen["pip_exit"] = pip.exit_code
        log(pip.stdout.strip().splitlines()[-1] if pip.stdout.strip() else "pip: no output")
        blocked = sbx.run_code(
            "import urllib.request\n"
            "def reach(url):\n"
            "    try:\n"
            "        urllib.request.urlopen(url, timeout=10)\n"
            "        return 'reached'\n"
            "    except Exception:\n"
            "        return 'blocked'\n"
            "reach('https://example.com')"
        )
        seen["other_host"] = blocked.text

        sbx.files.write("/home/user/rain.csv", CSV)
        analysis = sbx.run_code(
            "import pandas as pd\n"
            "from tabulate import tabulate\n"
            "df = pd.read_csv('/home/user/rain.csv')\n"
            "totals = df.groupby('city').rain_mm.sum()\n"
            "print(tabulate(totals.reset_index(), headers='keys', showindex=False))\n"
            "int(totals['Bergen'])"
        )
        if analysis.error:
            raise RuntimeError(f"{analysis.error.name}: {analysis.error.value}")
        seen["bergen_total"] = analysis.text
        seen["table"] = "".join(analysis.logs.stdout)
        log(seen["table"])

        plot = sbx.run_code(
            "import matplotlib.pyplot as plt\n"
            "for city, g in df.groupby('city'):\n"
            "    plt.plot(g.month, g.rain_mm, label=city)\n"
            "plt.legend(); plt.title('rain per month')\n"
            "plt.show()"
        )
        pngs = [r.png for r in plot.results if r.png]
        seen["png_bytes"] = len(base64.b64decode(pngs[0])) if pngs else 0
        log(f"plot: {seen['png_bytes']} bytes of PNG")

        # The user goes away: pause (memory kept, nothing running), wait.
        seen["paused"] = sbx.pause()
        log(f"paused; idle for {IDLE_SECONDS} s")
        sleep(IDLE_SECONDS)

        # An hour later: connect resumes the same kernel.
        sbx = Sandbox.connect(sandbox_id, timeout=600)
        again = sbx.run_code("int(df[df.city == 'Bergen'].rain_mm.sum()), len(df)")
        seen["after_resume"] = again.text
        log(f"after the pause: {again.text}")
    finally:
        sbx.kill()
        log("killed")
    return seen


if __name__ == "__main__":
    simulated = "--simulate" in sys.argv[1:]
    result = run(sleep=(lambda s: None) if simulated else time.sleep)
    ok = result.get("after_resume") == f"({result.get('bergen_total')}, 24)"
    print("variables intact after the pause" if ok else f"unexpected: {result}")
    sys.exit(0 if ok else 1)
