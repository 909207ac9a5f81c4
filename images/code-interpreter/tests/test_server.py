"""The code interpreter's server against a real Jupyter kernel, no sandbox.

Every stream is parsed by the E2B SDK's own parser
(`e2b_code_interpreter.models.parse_output`, pinned 2.11.5), so these tests
prove that what the server sends is what the SDK reads.

Needs jupyter_client, ipykernel, matplotlib, pandas and
e2b-code-interpreter==2.11.5 (scripts/setup.sh --tests installs them in
.venv). Run: .venv/bin/python -m pytest images/code-interpreter/tests
"""

import base64
import json
import os
import socket
import sys
import threading
import time

import httpx
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import server  # noqa: E402
from e2b_code_interpreter.models import Context, Execution, parse_output  # noqa: E402


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    cwd = tmp_path_factory.mktemp("cwd")
    contexts = server.Contexts(str(cwd))
    srv = server.make_server("127.0.0.1", 0, contexts)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}", str(cwd)
    srv.shutdown()
    contexts.shutdown()


def run(base_url, code, **body):
    """POST /execute and parse every line with the SDK; the callbacks'
    arguments are collected as the SDK would hand them to a user."""
    seen = {"stdout": [], "stderr": [], "result": [], "error": []}
    execution = Execution()
    raw = []
    with httpx.stream(
        "POST", f"{base_url}/execute", json={"code": code, **body}, timeout=120
    ) as r:
        assert r.status_code == 200, r.read()
        for line in r.iter_lines():
            raw.append(json.loads(line))
            parse_output(
                execution,
                line,
                on_stdout=seen["stdout"].append,
                on_stderr=seen["stderr"].append,
                on_result=seen["result"].append,
                on_error=seen["error"].append,
            )
    return execution, seen, raw


def test_text_result_and_execution_count(base):
    url, _ = base
    ex, _, raw = run(url, "x = 40\nx + 2")
    assert ex.text == "42"
    assert ex.error is None
    assert [r.is_main_result for r in ex.results] == [True]
    assert isinstance(ex.execution_count, int) and ex.execution_count >= 1
    assert raw[-1] == {"type": "end_of_execution"}
    # Variables stay in the context's kernel.
    ex2, _, _ = run(url, "x * 2")
    assert ex2.text == "80"
    assert ex2.execution_count == ex.execution_count + 1


def test_a_string_result_shows_without_its_quotes(base):
    url, _ = base
    ex, _, _ = run(url, "import os; os.environ['HOME'] = '/home/q'; os.getenv('HOME')")
    assert ex.text == "/home/q"
    ex, _, _ = run(url, 'x = "say \'hi\'"; x')
    assert ex.text == "say 'hi'"
    # Only a string's repr loses its quotes: a list of strings keeps them.
    ex, _, _ = run(url, "['a']")
    assert ex.text == "['a']"


def test_stdout_and_stderr_reach_the_callbacks_in_order(base):
    url, _ = base
    ex, seen, _ = run(
        url,
        "import sys\nprint('to out')\nsys.stdout.flush()\nprint('to err', file=sys.stderr)",
    )
    assert "".join(ex.logs.stdout) == "to out\n"
    assert "".join(ex.logs.stderr) == "to err\n"
    assert [m.line for m in seen["stdout"]] == ex.logs.stdout
    assert all(m.error is False for m in seen["stdout"])
    assert all(m.error is True for m in seen["stderr"])
    # Unix epoch in nanoseconds, as the SDK documents.
    assert abs(seen["stdout"][0].timestamp / 1e9 - time.time()) < 3600


def test_error_has_name_value_and_traceback(base):
    url, _ = base
    ex, seen, _ = run(url, "def f():\n    raise ValueError('bad value')\nf()")
    assert ex.error is not None
    assert ex.error.name == "ValueError"
    assert ex.error.value == "bad value"
    assert "f()" in ex.error.traceback and "ValueError" in ex.error.traceback
    assert seen["error"] == [ex.error]
    assert ex.results == []
    ex2, _, _ = run(url, "undefined_name")
    assert ex2.error.name == "NameError"


def test_matplotlib_figure_is_a_png(base):
    url, _ = base
    ex, _, _ = run(
        url,
        "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.show()",
    )
    assert ex.error is None, ex.error
    pngs = [r for r in ex.results if r.png]
    assert len(pngs) == 1
    assert pngs[0].is_main_result is False
    assert base64.b64decode(pngs[0].png)[:8] == b"\x89PNG\r\n\x1a\n"
    assert "png" in pngs[0].formats()


def test_dataframe_is_html_and_text(base):
    url, _ = base
    ex, _, _ = run(
        url,
        "import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': ['x', 'y']})",
    )
    assert ex.error is None, ex.error
    main = [r for r in ex.results if r.is_main_result]
    assert len(main) == 1
    assert "<table" in main[0].html and "<td>x</td>" in main[0].html
    assert "a" in main[0].text and "b" in main[0].text


def test_rich_formats_and_unknown_mime_types(base):
    url, _ = base
    ex, _, _ = run(
        url,
        "from IPython.display import display, Markdown, Latex, JSON, HTML, SVG, Javascript\n"
        "display(Markdown('# title'))\n"
        "display(Latex(r'$x^2$'))\n"
        "display(JSON({'k': [1, 2]}))\n"
        "display(Javascript('console.log(1)'))\n"
        "display(SVG('<svg xmlns=\"http://www.w3.org/2000/svg\"></svg>'))\n"
        "display({'application/x-custom': 'v', 'text/plain': 'c'}, raw=True)\n",
    )
    assert ex.error is None, ex.error
    by = {f: r for r in ex.results for f in r.formats()}
    assert by["markdown"].markdown == "# title"
    assert by["latex"].latex == "$x^2$"
    assert by["json"].json == {"k": [1, 2]}
    assert "console.log(1)" in by["javascript"].javascript
    assert by["svg"].svg.startswith("<svg")
    assert by["application/x-custom"].extra == {"application/x-custom": "v"}
    assert all(not r.is_main_result for r in ex.results)


def test_env_vars_apply_to_one_execution(base):
    url, _ = base
    ex, _, _ = run(
        url, "import os\nos.environ.get('STASIS_CI_T')", env_vars={"STASIS_CI_T": "one"}
    )
    assert ex.text == "one"
    ex, _, _ = run(url, "import os\nstr(os.environ.get('STASIS_CI_T'))")
    assert ex.text == "None"


def test_contexts_create_list_run_restart_remove(base):
    url, cwd = base
    d = os.path.join(cwd, "sub")
    r = httpx.post(f"{url}/contexts", json={"language": "python", "cwd": d}, timeout=120)
    assert r.status_code == 200, r.text
    ctx = Context.from_json(r.json())
    assert (ctx.language, ctx.cwd) == ("python", d)
    listed = [Context.from_json(c).id for c in httpx.get(f"{url}/contexts").json()]
    assert ctx.id in listed
    ex, _, _ = run(url, "import os\ny = 7\nos.getcwd()", context_id=ctx.id)
    assert ex.text == d
    # Contexts do not share variables.
    ex, _, _ = run(url, "y")
    assert ex.error is not None and ex.error.name == "NameError"
    ex, _, _ = run(url, "y", context_id=ctx.id)
    assert ex.text == "7"
    assert httpx.post(f"{url}/contexts/{ctx.id}/restart", timeout=120).status_code == 204
    ex, _, _ = run(url, "y", context_id=ctx.id)
    assert ex.error.name == "NameError"
    assert httpx.delete(f"{url}/contexts/{ctx.id}").status_code == 204
    assert ctx.id not in [c["id"] for c in httpx.get(f"{url}/contexts").json()]
    r = httpx.post(f"{url}/execute", json={"code": "1", "context_id": ctx.id})
    assert r.status_code == 404 and r.json()["code"] == 404
    assert httpx.delete(f"{url}/contexts/{ctx.id}").status_code == 404


def test_bad_requests_are_json_errors(base):
    url, _ = base
    for body, status in [
        ({"code": "1", "language": "cobol"}, 400),
        ({"code": "1", "language": "python", "context_id": "x"}, 400),
        ({"code": 1}, 400),
        ({"code": "1", "env_vars": {"A": 1}}, 400),
    ]:
        r = httpx.post(f"{url}/execute", json=body)
        assert r.status_code == status, (body, r.text)
        assert r.json()["code"] == status and r.json()["message"]
    r = httpx.post(f"{url}/execute", content=b"{not json")
    assert r.status_code == 400
    assert httpx.get(f"{url}/nothing").status_code == 404
    assert httpx.get(f"{url}/health").json() == {"status": "ok"}


def test_a_caller_that_goes_away_interrupts_the_code(base):
    url, _ = base
    # The caller reads the first line, then hangs up mid-execution.
    host, port = url.removeprefix("http://").split(":")
    body = json.dumps({"code": "import time\nprint('started', flush=True)\ntime.sleep(600)"})
    s = socket.create_connection((host, int(port)))
    s.sendall(
        (
            f"POST /execute HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n{body}"
        ).encode()
    )
    got = b""
    while b"started" not in got:
        chunk = s.recv(4096)
        assert chunk, got
        got += chunk
    s.close()
    # The kernel is free again only if the sleep was interrupted.
    ex, _, _ = run(url, "'free'")
    assert ex.text == "free"


def test_what_e2b_kernels_offer_pd_data_and_pil_images(base):
    url, _ = base
    # A fresh context: its execution count starts at one, the setup code
    # it ran at start not counted.
    ctx = httpx.post(f"{url}/contexts", json={}, timeout=120).json()["id"]
    run(url, "!pwd", context_id=ctx)
    ex, _, _ = run(url, "!pwd", context_id=ctx)
    assert ex.execution_count == 2
    # `pd` without an import, and a DataFrame's columns as `data`.
    ex, _, _ = run(url, 'pd.DataFrame({"a": [1, 2, 3], "b": ["x", None, "z"]})', context_id=ctx)
    assert ex.error is None, ex.error
    assert ex.results[0].data == {"a": [1, 2, 3], "b": ["x", None, "z"]}
    assert "<table" in ex.results[0].html
    image = (
        "import numpy\nfrom PIL import Image\n"
        "image = Image.fromarray((numpy.random.rand(8, 8, 3) * 255).astype('uint8'))\n"
    )
    for tail in ["image.show()\nprint('done')\n", "image\n", "image.save('/tmp/stasis-ci-test.png')\n"]:
        ex, _, _ = run(url, image + tail, context_id=ctx)
        assert ex.error is None, ex.error
        assert ex.results and ex.results[0].png, tail
    httpx.delete(f"{url}/contexts/{ctx}")
