"""A scripted Agents SDK run in a stasis sandbox, in two processes.

    python agent_flow.py start  STATE_FILE   # runs until the approval interruption, saves RunState
    python agent_flow.py resume STATE_FILE   # new process: restores RunState, approves, finishes

The model is the SDK's own ScriptedModel (no network). Turn 1 runs code in the
sandbox through the SDK's shell tool (it appends to ``computed.txt``); turn 2
asks for ``send_email``, a function tool that needs approval and whose side
effect is a stasis run tool call keyed by the SDK's tool call id (it appends to
``outbox/sent.log``). Each phase prints one JSON line describing what it saw.
Connection: ``$STASIS_URL`` and ``$STASIS_TOKEN_FILE`` (if any).
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Literal

from agents import RunConfig, Runner, RunState, function_tool
from agents.sandbox import SandboxAgent, SandboxRunConfig
from agents.sandbox.capabilities import Capability, Shell
from agents.testing import ScriptedModel, assistant_message, function_call
from agents.tool import Tool
from agents.tool_context import ToolContext

from stasis_client.agents_sdk import (
    StasisSandboxClient,
    StasisSandboxClientOptions,
    StasisSandboxSession,
)

COMPUTE = (
    "python3 -c \"import math; v = sum(i*i for i in range(7)); "
    "open('computed.txt', 'a').write(str(v) + chr(10)); print('computed', v)\""
)


class Outbox(Capability):
    """Gives the agent a ``send_email`` tool that needs a human's approval."""

    type: Literal["outbox"] = "outbox"

    def tools(self) -> list[Tool]:
        session = getattr(self.session, "_inner", self.session)
        if not isinstance(session, StasisSandboxSession):
            raise TypeError("the outbox needs a stasis sandbox session")

        @function_tool(needs_approval=True)
        async def send_email(ctx: ToolContext, to: str, body: str) -> str:
            """Send an email (a side effect: it must happen exactly once)."""
            line = json.dumps({"to": to, "body": body})
            outcome = await session.tool_call(
                ctx.tool_call_id,
                ["sh", "-c", 'mkdir -p outbox && printf "%s\\n" "$1" >> outbox/sent.log', "sh", line],
            )
            return f"{outcome.outcome} (replayed={outcome.replayed})"

        return [send_email]


def agent(model: ScriptedModel) -> SandboxAgent:
    return SandboxAgent(
        name="ops",
        instructions="Compute the value, then email it to ops.",
        model=model,
        capabilities=[Shell(), Outbox()],
    )


def run_config(client: StasisSandboxClient) -> RunConfig:
    return RunConfig(
        tracing_disabled=True,
        sandbox=SandboxRunConfig(
            client=client,
            options=StasisSandboxClientOptions(
                manifest={"lifecycle": {"idle_timeout_secs": 600}},
            ),
        ),
    )


def sandbox_section(state_json: str) -> dict:
    data = json.loads(state_json)
    sandbox = data.get("sandbox") or {}
    return {
        "backend_id": sandbox.get("backend_id"),
        "sandbox_id": (sandbox.get("session_state") or {}).get("sandbox_id"),
        "snapshot_id": ((sandbox.get("session_state") or {}).get("snapshot") or {}).get("snapshot_id"),
        "run_id": (sandbox.get("session_state") or {}).get("run_id"),
    }


async def start(state_file: Path) -> dict:
    model = ScriptedModel(
        [
            [function_call("exec_command", {"cmd": COMPUTE}, call_id="call-compute-1")],
            [function_call("send_email", {"to": "ops@example.com", "body": "value is 91"}, call_id="call-email-1")],
        ]
    )
    client = StasisSandboxClient()
    result = await Runner.run(agent(model), "go", run_config=run_config(client))
    interruptions = [i.raw_item.name for i in result.interruptions]
    state = result.to_state()
    text = state.to_string()
    state_file.write_text(text)
    await client.api.aclose()
    return {"interruptions": interruptions, "remaining_steps": model.remaining_steps, **sandbox_section(text)}


async def resume(state_file: Path) -> dict:
    model = ScriptedModel([[assistant_message("Emailed ops: value is 91.")]])
    a = agent(model)
    state = await RunState.from_string(a, state_file.read_text())
    pending = state.get_interruptions()
    for item in pending:
        state.approve(item)
    client = StasisSandboxClient()
    result = await Runner.run(a, state, run_config=run_config(client))
    tool_outputs = {
        _call_id(i.raw_item): str(i.output)
        for i in result.new_items
        if type(i).__name__ == "ToolCallOutputItem"
    }
    after = result.to_state().to_string()
    await client.api.aclose()
    return {
        "approved": [i.raw_item.name for i in pending],
        "final_output": result.final_output,
        "tool_outputs": tool_outputs,
        "remaining_steps": model.remaining_steps,
        **sandbox_section(after),
    }


def _call_id(raw: object) -> str:
    return str(raw.get("call_id") if isinstance(raw, dict) else getattr(raw, "call_id", ""))


def main() -> None:
    phase, path = sys.argv[1], Path(sys.argv[2])
    out = asyncio.run(start(path) if phase == "start" else resume(path))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
