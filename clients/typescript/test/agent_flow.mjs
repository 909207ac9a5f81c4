// A scripted Agents SDK run in a stasis sandbox, in two processes:
//
//   node agent_flow.mjs start  STATE_FILE   # runs until the approval interruption, saves the RunState
//   node agent_flow.mjs resume STATE_FILE   # new process: restores the RunState, approves, finishes
//
// The model is the SDK's own ScriptedModel (no network). Turn 1 runs code in
// the sandbox through the SDK's shell tool (it appends to computed.txt);
// turn 2 asks for send_email, a function tool that needs approval and whose
// side effect is a stasis run tool call keyed by the SDK's tool call id (it
// appends to outbox/sent.log). Each phase prints one JSON line of what it saw.
// Connection: $STASIS_URL and $STASIS_TOKEN_FILE (if any).
import { readFileSync, writeFileSync } from 'node:fs';

import { RunState, run, tool } from '@openai/agents';
import { Capability, SandboxAgent, shell } from '@openai/agents/sandbox';
import { ScriptedModel, assistantMessage, functionCall } from '@openai/agents/testing';
import { z } from 'zod';

import { StasisSandboxClient, StasisSandboxSession } from 'stasis-client/agents';

const COMPUTE =
  'python3 -c "v = sum(i*i for i in range(7)); open(\'computed.txt\', \'a\').write(str(v) + chr(10)); print(\'computed\', v)"';

/** Gives the agent a send_email tool that needs a human's approval. */
class Outbox extends Capability {
  type = 'outbox';
  tools() {
    const session = this._session;
    if (!(session instanceof StasisSandboxSession)) throw new TypeError('the outbox needs a stasis sandbox session');
    return [
      tool({
        name: 'send_email',
        description: 'Send an email (a side effect: it must happen exactly once).',
        parameters: z.object({ to: z.string(), body: z.string() }),
        needsApproval: true,
        execute: async ({ to, body }, _ctx, details) => {
          const line = JSON.stringify({ to, body });
          const outcome = await session.toolCall(details?.toolCall?.callId ?? 'no-call-id', [
            'sh',
            '-c',
            'mkdir -p outbox && printf "%s\\n" "$1" >> outbox/sent.log',
            'sh',
            line,
          ]);
          return `${outcome.outcome} (replayed=${outcome.replayed})`;
        },
      }),
    ];
  }
}

function agent(model) {
  return new SandboxAgent({
    name: 'ops',
    instructions: 'Compute the value, then email it to ops.',
    model,
    capabilities: [shell(), new Outbox()],
  });
}

const client = () => new StasisSandboxClient({ options: { manifest: { lifecycle: { idle_timeout_secs: 600 } } } });

function sandboxSection(text) {
  const data = JSON.parse(text);
  const sb = data.sandbox ?? data._sandbox ?? {};
  const provider = sb.sessionState?.providerState ?? {};
  return {
    backendId: sb.backendId ?? null,
    sandboxId: provider.sandboxId ?? null,
    snapshotId: provider.snapshotId ?? null,
    runId: provider.runId ?? null,
  };
}

async function start(stateFile) {
  const model = new ScriptedModel([
    [functionCall('exec_command', { cmd: COMPUTE }, { callId: 'call-compute-1' })],
    [functionCall('send_email', { to: 'ops@example.com', body: 'value is 91' }, { callId: 'call-email-1' })],
  ]);
  const result = await run(agent(model), 'go', { sandbox: { client: client() } });
  const text = result.state.toString();
  writeFileSync(stateFile, text);
  return {
    interruptions: result.interruptions.map((i) => i.rawItem.name),
    remainingSteps: model.remainingSteps,
    ...sandboxSection(text),
  };
}

async function resume(stateFile) {
  const model = new ScriptedModel([[assistantMessage('Emailed ops: value is 91.')]]);
  const a = agent(model);
  const state = await RunState.fromString(a, readFileSync(stateFile, 'utf8'));
  const pending = state.getInterruptions();
  for (const item of pending) state.approve(item);
  const result = await run(a, state, { sandbox: { client: client() } });
  const toolOutputs = {};
  for (const item of result.newItems) {
    if (item.type === 'tool_call_output_item') toolOutputs[item.rawItem.callId] = String(item.output);
  }
  return {
    approved: pending.map((i) => i.rawItem.name),
    finalOutput: result.finalOutput,
    toolOutputs,
    remainingSteps: model.remainingSteps,
  };
}

const [phase, path] = process.argv.slice(2);
const out = phase === 'start' ? await start(path) : await resume(path);
console.log(JSON.stringify(out));
