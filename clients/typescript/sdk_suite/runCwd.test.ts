// Ported from openai-agents-js packages/agents-core/test/sandboxRunCwd.test.ts
// (MIT, see README.md): the fake and scripted sessions are replaced by real
// stasis sessions; where upstream records a session's calls or injects a
// fault, a spy wraps the real session's method (`spyOn`). The directories the
// fakes pretended to have exist in the sandbox. Every behavioural assertion
// is kept.
import { afterAll, describe, expect, it } from 'vitest';
import { RunContext } from '@openai/agents';
import { Manifest, SandboxAgent, SandboxRuntimeManager, SandboxWorkspaceScope, memory, skills } from '@openai/agents/sandbox';
import type { StasisSandboxSession } from '../dist/agents/index.js';
import { box, destroyAll, stasisSandboxClient } from './harness.js';

afterAll(destroyAll);

type Call = { method: string; args: unknown[] };

/** Record the calls of `method` on the real session (and let `fault` answer some of them instead). */
function spyOn(session: StasisSandboxSession, method: 'directoryExists' | 'readFile', fault?: (attempt: number) => unknown) {
  const calls: Call[] = [];
  const real = (session as any)[method].bind(session);
  (session as any)[method] = async (...args: unknown[]) => {
    calls.push({ method, args });
    if (fault) {
      const f = fault(calls.length);
      if (f !== undefined) throw f;
    }
    return real(...args);
  };
  return calls;
}

async function sessionWith(dirs: string[] = [], files: Record<string, string> = {}): Promise<StasisSandboxSession> {
  const session = await stasisSandboxClient().create(new Manifest({ root: '/workspace' }));
  for (const d of dirs) await box(session).mkdir(`/workspace/${d}`);
  for (const [p, c] of Object.entries(files)) await session.writeFile(p, c);
  return session;
}

describe('sandbox run cwd (stasis sessions)', () => {
  it('keeps concurrent run scopes independent on a shared session', async () => {
    const session = await sessionWith(['tasks/a', 'tasks/b']);
    const probed = spyOn(session, 'directoryExists');
    const agents = ['sandbox-a', 'sandbox-b'].map((name) => new SandboxAgent({ name, capabilities: [] }));
    const managers = ['tasks/a', 'tasks/b'].map(
      (cwd, index) => new SandboxRuntimeManager({ startingAgent: agents[index] as any, sandboxConfig: { session, cwd } }),
    );
    const preparedAgents = await Promise.all(
      managers.map((manager, index) => manager.prepareAgent({ currentAgent: agents[index] as any, turnInput: [] })),
    );
    const prompts = await Promise.all(preparedAgents.map(({ executionAgent }) => executionAgent.getSystemPrompt(new RunContext())));
    expect(probed.map((c) => c.args[0]).sort()).toEqual(['tasks/a', 'tasks/b']);
    expect(prompts[0]).toContain('/workspace/tasks/a');
    expect(prompts[1]).toContain('/workspace/tasks/b');
  });

  it('validates a provided session cwd before preparing the agent', async () => {
    const session = await sessionWith(['tasks/a']);
    const calls = spyOn(session, 'directoryExists');
    const agent = new SandboxAgent({ name: 'sandbox', capabilities: [] });
    const manager = new SandboxRuntimeManager({ startingAgent: agent as any, sandboxConfig: { session, cwd: 'tasks/a' } });
    const prepared = await manager.prepareAgent({ currentAgent: agent as any, turnInput: [] });
    const prompt = await prepared.executionAgent.getSystemPrompt(new RunContext());
    expect(calls[0]).toMatchObject({ method: 'directoryExists', args: ['tasks/a', undefined] });
    expect(prompt).toContain('For this run, the working directory is `/workspace/tasks/a`.');
    expect(prompt).toContain('The working directory changes path resolution; it does not isolate this run');
  });

  it('rejects an inaccessible cwd before agent preparation', async () => {
    const session = await sessionWith();
    const agent = new SandboxAgent({ name: 'sandbox', capabilities: [] });
    const manager = new SandboxRuntimeManager({ startingAgent: agent as any, sandboxConfig: { session, cwd: 'tasks/missing' } });
    await expect(manager.prepareAgent({ currentAgent: agent as any, turnInput: [] })).rejects.toThrow(
      'Sandbox working directory "tasks/missing" does not exist or is not accessible.',
    );
  });

  it('preserves path probe errors and does not cache failures', async () => {
    const providerError = Object.assign(new Error('credentials expired'), { code: 'SANDBOX_AUTH_EXPIRED', retryable: true });
    const session = await sessionWith(['tasks/a']);
    const calls = spyOn(session, 'directoryExists', (attempt) => (attempt === 1 ? providerError : undefined));
    const agent = new SandboxAgent({ name: 'sandbox', capabilities: [] });
    const manager = new SandboxRuntimeManager({ startingAgent: agent as any, sandboxConfig: { session, cwd: 'tasks/a' } });
    await expect(manager.prepareAgent({ currentAgent: agent as any, turnInput: [] })).rejects.toBe(providerError);
    await manager.prepareAgent({ currentAgent: agent as any, turnInput: [] });
    expect(calls.length).toBe(2);
  });

  it('preserves directory probe errors', async () => {
    const providerError = Object.assign(new Error('backend timed out'), { code: 'SANDBOX_TIMEOUT', retryable: true });
    const session = await sessionWith(['tasks/a']);
    const calls = spyOn(session, 'directoryExists', () => providerError);
    const agent = new SandboxAgent({ name: 'sandbox', capabilities: [] });
    const manager = new SandboxRuntimeManager({ startingAgent: agent as any, sandboxConfig: { session, cwd: 'tasks/a' } });
    await expect(manager.prepareAgent({ currentAgent: agent as any, turnInput: [] })).rejects.toBe(providerError);
    expect(calls.length).toBe(1);
  });

  it('revalidates cwd before a later model turn', async () => {
    const session = await sessionWith(['tasks/a']);
    const calls = spyOn(session, 'directoryExists');
    const agent = new SandboxAgent({ name: 'sandbox', capabilities: [] });
    const manager = new SandboxRuntimeManager({ startingAgent: agent as any, sandboxConfig: { session, cwd: 'tasks/a' } });
    await manager.prepareAgent({ currentAgent: agent as any, turnInput: [] });
    // The directory goes between the turns (upstream's fake answers false the second time).
    await box(session).rm('/workspace/tasks/a');
    await expect(manager.prepareAgent({ currentAgent: agent as any, turnInput: [] })).rejects.toThrow(
      'Sandbox working directory "tasks/a" does not exist or is not accessible.',
    );
    expect(calls.length).toBe(2);
  });

  it('keeps Memory and Skills session-owned while rendering stable model paths', async () => {
    const scope = SandboxWorkspaceScope.fromCwd('tasks/a');
    const manifest = new Manifest({ root: '/workspace' });
    const memorySession = await sessionWith([], { 'memories/memory_summary.md': 'remember this' });
    const calls = spyOn(memorySession, 'readFile');
    const memoryCapability = memory({ read: { liveUpdate: false } }).bind(memorySession).bindWorkspaceScope(scope);
    const skillsCapability = skills({ skills: [{ name: 'reviewer', description: 'Review code.', content: '# Reviewer' }] }).bindWorkspaceScope(scope);
    const memoryInstructions = await memoryCapability.instructions(manifest);
    const skillsInstructions = await skillsCapability.instructions(manifest);
    expect(calls[0]).toMatchObject({ method: 'readFile', args: [{ path: 'memories/memory_summary.md' }] });
    expect(memoryInstructions).toContain('/workspace/memories/memory_summary.md');
    expect(skillsInstructions).toContain('(file: /workspace/.agents/reviewer)');
  });
});
