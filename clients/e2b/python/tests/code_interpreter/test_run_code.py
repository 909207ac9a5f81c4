"""run_code through the unmodified `e2b_code_interpreter` SDK against a
stasis daemon: text, a matplotlib PNG, a DataFrame's HTML, an error with
name/value/traceback, the stdout/stderr callbacks, env vars, contexts, and
the kernel's variables surviving a pause and a connect."""

import base64

import pytest
from e2b import NotFoundException, SandboxException
from e2b_code_interpreter import Sandbox


@pytest.mark.microvm
def test_text_and_state_between_calls(sandbox):
    r = sandbox.run_code("x = 1\nx + 1")
    assert r.text == "2"
    assert r.error is None
    assert r.execution_count is not None
    assert sandbox.run_code("x + 41").text == "42"


def test_matplotlib_png(sandbox):
    r = sandbox.run_code(
        "import matplotlib.pyplot as plt\n"
        "plt.plot([1, 2, 3], [1, 4, 9])\n"
        "plt.show()"
    )
    assert r.error is None, r.error
    pngs = [x for x in r.results if x.png]
    assert len(pngs) == 1
    assert base64.b64decode(pngs[0].png)[:8] == b"\x89PNG\r\n\x1a\n"


def test_dataframe_html(sandbox):
    r = sandbox.run_code("import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': ['x', 'y']})")
    assert r.error is None, r.error
    main = [x for x in r.results if x.is_main_result]
    assert len(main) == 1
    assert "<table" in main[0].html
    assert "html" in main[0].formats()


def test_error_name_value_traceback(sandbox):
    seen = []
    r = sandbox.run_code("raise ValueError('nope')", on_error=seen.append)
    assert r.error is not None
    assert r.error.name == "ValueError"
    assert r.error.value == "nope"
    assert "ValueError" in r.error.traceback
    assert seen == [r.error]


def test_stdout_stderr_callbacks(sandbox):
    out, err = [], []
    r = sandbox.run_code(
        "import sys\nprint('hello')\nsys.stdout.flush()\nprint('oops', file=sys.stderr)",
        on_stdout=out.append,
        on_stderr=err.append,
    )
    assert "".join(m.line for m in out) == "hello\n"
    assert "".join(m.line for m in err) == "oops\n"
    assert r.logs.stdout == [m.line for m in out]
    assert r.logs.stderr == [m.line for m in err]


def test_env_vars_for_one_run(sandbox):
    r = sandbox.run_code("import os\nos.environ['ONE_RUN']", envs={"ONE_RUN": "yes"})
    assert r.text == "yes"
    r = sandbox.run_code("import os\nstr(os.environ.get('ONE_RUN'))")
    assert r.text == "None"


def test_contexts(sandbox):
    ctx = sandbox.create_code_context(cwd="/tmp")
    assert ctx.language == "python" and ctx.cwd == "/tmp"
    assert ctx.id in [c.id for c in sandbox.list_code_contexts()]
    assert sandbox.run_code("import os\nv = 5\nos.getcwd()", context=ctx).text == "/tmp"
    # Separate kernels: the default context does not see it.
    assert sandbox.run_code("v").error.name == "NameError"
    sandbox.restart_code_context(ctx)
    assert sandbox.run_code("v", context=ctx).error.name == "NameError"
    sandbox.remove_code_context(ctx)
    assert ctx.id not in [c.id for c in sandbox.list_code_contexts()]
    with pytest.raises(NotFoundException):
        sandbox.run_code("1", context=ctx)


def test_unsupported_language_is_the_sdks_error(sandbox):
    with pytest.raises(SandboxException) as e:
        sandbox.run_code("console.log(1)", language="javascript")
    assert "not supported" in str(e.value)


@pytest.mark.microvm
def test_kernel_variables_survive_pause_and_connect(sandbox):
    sandbox.run_code("import pandas as pd\ndf = pd.DataFrame({'a': [1, 2, 3]})\nkept = 'yes'")
    assert sandbox.pause() is True
    again = Sandbox.connect(sandbox.sandbox_id)
    assert again.run_code("kept").text == "yes"
    assert again.run_code("int(df.a.sum())").text == "6"


async def test_async_run_code(async_sandbox):
    out = []
    r = await async_sandbox.run_code("print('a')\n3 * 3", on_stdout=out.append)
    assert r.text == "9"
    assert [m.line for m in out] == ["a\n"]
