"""A scripted Agents SDK run whose command is still running when the run
stops for an approval, in two processes.

    python approval_flow.py start  STATE_FILE BACKEND           # until the interruption; saves RunState
    python approval_flow.py resume STATE_FILE BACKEND SESSION   # new process: approves, polls the command

Turn 1 starts, through the SDK's ``exec_command`` tool with a short yield, a
command that waits for a file named ``release`` and then writes ``done.txt``:
it is still running when turn 2 asks for ``release_work``, a function tool
that needs approval. After the approval (in a new process) that tool creates
``release``; the model then polls the command with ``write_stdin`` under the
SDK process id the first phase saw. Each phase prints one JSON line.
Connection: ``$STASIS_URL`` and ``$STASIS_TOKEN_FILE`` (if any).
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
from pathlib import Path
from typing import Literal

from agents import RunConfig, Runner, RunState, function_tool
from agents.sandbox import SandboxAgent, SandboxRunConfig
from agents.sandbox.capabilities import Capability, Shell
from agents.testing import ScriptedModel, assistant_message, function_call
from agents.tool import Tool

from stasis_client.agents_sdk import (
    StasisSandboxClient,
    StasisSandboxClientOptions,
    StasisSandboxSession,
)

WORK = "while [ ! -e release ]; do sleep 0.1; done; echo finished > done.txt; echo work-finished"


class Gate(Capability):
    """A ``release_work`` tool that needs a human's approval."""

    type: Literal["gate"] = "gate"

    def tools(self) -> list[Tool]:
        session = getattr(self.session, "_inner", self.session)
        if not isinstance(session, StasisSandboxSession):
            raise TypeError("the gate needs a stasis sandbox session")

        @function_tool(needs_approval=True)
        async def release_work() -> str:
            """Let the waiting work finish."""
            r = await session.exec("touch release")
            return f"released (exit {r.exit_code})"

        return [release_work]


def agent(model: ScriptedModel) -> SandboxAgent:
    return SandboxAgent(name="worker", instructions="Run the work.", model=model, capabilities=[Shell(), Gate()])


def run_config(client: StasisSandboxClient, backend: str) -> RunConfig:
    return RunConfig(
        tracing_disabled=True,
        sandbox=SandboxRunConfig(
            client=client,
            options=StasisSandboxClientOptions(
                manifest={"backend": backend, "lifecycle": {"on_idle": "nothing"}},
            ),
        ),
    )


def outputs(result) -> dict[str, str]:
    out = {}
    for i in result.new_items:
        if type(i).__name__ == "ToolCallOutputItem":
            raw = i.raw_item
            call_id = raw.get("call_id") if isinstance(raw, dict) else getattr(raw, "call_id", "")
            out[str(call_id)] = str(i.output)
    return out


async def start(state_file: Path, backend: str) -> dict:
    model = ScriptedModel(
        [
            [function_call("exec_command", {"cmd": WORK, "yield_time_ms": 300}, call_id="call-work")],
            [function_call("release_work", {}, call_id="call-release")],
        ]
    )
    client = StasisSandboxClient()
    result = await Runner.run(agent(model), "go", run_config=run_config(client, backend))
    text = result.to_state().to_string()
    state_file.write_text(text)
    await client.api.aclose()
    work = outputs(result)["call-work"]
    m = re.search(r"session ID (\d+)", work)
    session_state = (json.loads(text).get("sandbox") or {}).get("session_state") or {}
    return {
        "interruptions": [i.raw_item.name for i in result.interruptions],
        "work_output": work,
        "process_id": int(m.group(1)) if m else None,
        "sandbox_id": session_state.get("sandbox_id"),
        "pty_processes": session_state.get("pty_processes"),
    }


async def resume(state_file: Path, backend: str, process_id: int) -> dict:
    model = ScriptedModel(
        [
            [function_call("write_stdin", {"session_id": process_id, "yield_time_ms": 30_000}, call_id="call-poll")],
            [assistant_message("The work finished.")],
        ]
    )
    a = agent(model)
    state = await RunState.from_string(a, state_file.read_text())
    for item in state.get_interruptions():
        state.approve(item)
    client = StasisSandboxClient()
    result = await Runner.run(a, state, run_config=run_config(client, backend))
    await client.api.aclose()
    return {"final_output": result.final_output, "tool_outputs": outputs(result)}


def main() -> None:
    phase, path, backend = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
    if phase == "start":
        out = asyncio.run(start(path, backend))
    else:
        out = asyncio.run(resume(path, backend, int(sys.argv[4])))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
