// @ts-check
// Ported from openai-agents-js integration-tests/node/sandbox-unix-local.mjs
// (MIT, see ../README.md): the UnixLocal client is replaced by the stasis
// provider (connection from $STASIS_URL / $STASIS_TOKEN_FILE) and the OpenAI
// model by the SDK's ScriptedModel (no network): it calls exec_command on
// README.md and scripts/marker.sh, then answers with what those printed, so
// the final line is only right when the sandbox really ran them.

import { getGlobalTraceProvider, run } from '@openai/agents';
import { Manifest, SandboxAgent, shell } from '@openai/agents/sandbox';
import { ScriptedModel, assistantMessage, functionCall, modelResponder } from '@openai/agents/testing';
import { StasisSandboxClient } from 'stasis-client/agents';

const manifest = new Manifest({
  entries: {
    'README.md': {
      type: 'file',
      content: '# Unix Local Sandbox\n\nmarker: unix-local-node\n',
    },
    'scripts/marker.sh': {
      type: 'file',
      content: '#!/bin/sh\nprintf "unix-local-node-command\\n"\n',
      executable: true,
    },
  },
});

const model = new ScriptedModel([
  [functionCall('exec_command', { cmd: 'cat README.md' }, { callId: 'call-readme' })],
  [functionCall('exec_command', { cmd: './scripts/marker.sh' }, { callId: 'call-marker' })],
  modelResponder((call) => {
    const seen = JSON.stringify(call.request.input).replaceAll('\\n', '\n');
    const marker = seen.match(/marker: ([a-z-]+)/)?.[1] ?? 'missing';
    const command = seen.match(/([a-z-]+-command)/)?.[1] ?? 'missing';
    return [assistantMessage(`[SANDBOX_RESPONSE]${marker}:${command}[/SANDBOX_RESPONSE]`)];
  }),
]);

const client = new StasisSandboxClient({ options: { onDelete: 'destroy' } });
const session = await client.create(manifest);
const agent = new SandboxAgent({
  name: 'Unix local sandbox smoke',
  instructions:
    'Inspect README.md, run scripts/marker.sh, and respond exactly with [SANDBOX_RESPONSE]unix-local-node:unix-local-node-command[/SANDBOX_RESPONSE].',
  defaultManifest: manifest,
  capabilities: [shell()],
  model,
  modelSettings: {
    toolChoice: 'required',
  },
});

try {
  const result = await run(agent, 'Run the unix-local sandbox smoke check.', {
    maxTurns: 8,
    sandbox: { session },
  });
  const toolNames = result.newItems.flatMap((item) => {
    if (item.type !== 'tool_call_item') {
      return [];
    }
    const rawItem = /** @type {{ name?: unknown }} */ (item.rawItem);
    return typeof rawItem.name === 'string' ? [rawItem.name] : [];
  });

  console.log(`[SANDBOX_TOOLS]${toolNames.join(',')}[/SANDBOX_TOOLS]`);
  console.log(String(result.finalOutput));
} finally {
  await session.close?.();
  await getGlobalTraceProvider().shutdown();
}
