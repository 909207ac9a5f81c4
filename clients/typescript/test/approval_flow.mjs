// A scripted Agents SDK run whose command is still running when the run
// stops for an approval, in two processes:
//
//   node approval_flow.mjs start  STATE_FILE           # until the interruption; saves the RunState
//   node approval_flow.mjs resume STATE_FILE SESSION   # new process: approves, polls the command
//
// Turn 1 starts, through the SDK's exec_command tool with a short yield, a
// command that waits for a file named `release` and then writes done.txt:
// it is still running when turn 2 asks for release_work, a function tool
// that needs approval. After the approval (in a new process) that tool
// creates `release`; the model then polls the command with write_stdin under
// the SDK session id the first phase saw. Each phase prints one JSON line.
// Connection: $STASIS_URL and $STASIS_TOKEN_FILE (if any).
import { readFileSync, writeFileSync } from 'node:fs';

import { RunState, run, tool } from '@openai/agents';
import { Capability, SandboxAgent, shell } from '@openai/agents/sandbox';
import { ScriptedModel, assistantMessage, functionCall } from '@openai/agents/testing';
import { z } from 'zod';

import { StasisSandboxClient, StasisSandboxSession } from 'stasis-client/agents';

const WORK = 'while [ ! -e release ]; do sleep 0.1; done; echo finished > done.txt; echo work-finished';

/** A release_work tool that needs a human's approval. */
class Gate extends Capability {
  type = 'gate';
  tools() {
    const session = this._session;
    if (!(session instanceof StasisSandboxSession)) throw new TypeError('the gate needs a stasis sandbox session');
    return [
      tool({
        name: 'release_work',
        description: 'Let the waiting work finish.',
        parameters: z.object({}),
        needsApproval: true,
        execute: async () => {
          const r = await session.exec({ cmd: 'touch release' });
          return `released (exit ${r.exitCode})`;
        },
      }),
    ];
  }
}

const agent = (model) => new SandboxAgent({ name: 'worker', instructions: 'Run the work.', model, capabilities: [shell(), new Gate()] });
const client = () => new StasisSandboxClient({ options: { manifest: { lifecycle: { on_idle: 'nothing' } } } });

function outputs(result) {
  const out = {};
  for (const item of result.newItems) {
    if (item.type === 'tool_call_output_item') out[item.rawItem.callId] = typeof item.output === 'string' ? item.output : JSON.stringify(item.output);
  }
  return out;
}

async function start(stateFile) {
  const model = new ScriptedModel([
    [functionCall('exec_command', { cmd: WORK, yield_time_ms: 300 }, { callId: 'call-work' })],
    [functionCall('release_work', {}, { callId: 'call-release' })],
  ]);
  const result = await run(agent(model), 'go', { sandbox: { client: client() } });
  const text = result.state.toString();
  writeFileSync(stateFile, text);
  const work = outputs(result)['call-work'];
  const data = JSON.parse(text);
  const sb = data.sandbox ?? data._sandbox ?? {};
  const provider = sb.sessionState?.providerState ?? Object.values(sb.sessionsByAgent ?? {})[0]?.sessionState?.providerState ?? {};
  return {
    interruptions: result.interruptions.map((i) => i.rawItem.name),
    workOutput: work,
    sessionId: Number(/session ID (\d+)/.exec(work)?.[1] ?? NaN),
    sandboxId: provider.sandboxId ?? null,
    processes: provider.processes ?? null,
  };
}

async function resume(stateFile, sessionId) {
  const model = new ScriptedModel([
    [functionCall('write_stdin', { session_id: sessionId, yield_time_ms: 30_000 }, { callId: 'call-poll' })],
    [assistantMessage('The work finished.')],
  ]);
  const a = agent(model);
  const state = await RunState.fromString(a, readFileSync(stateFile, 'utf8'));
  for (const item of state.getInterruptions()) state.approve(item);
  const result = await run(a, state, { sandbox: { client: client() } });
  return { finalOutput: result.finalOutput, toolOutputs: outputs(result) };
}

const [phase, path, sessionId] = process.argv.slice(2);
const out = phase === 'start' ? await start(path) : await resume(path, Number(sessionId));
console.log(JSON.stringify(out));
