// A session output window as stdout and stderr for the provider's exec
// results: the daemon's split when it sends one, else (an older daemon)
// everything as stdout.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import { splitStreams } from '../dist/agents/index.js';

const text = (b) => Buffer.from(b).toString();

describe('splitStreams', () => {
  it("takes the daemon's split when it has one", () => {
    const { out, err } = splitStreams({
      bytes: Buffer.from('outERR'),
      stdoutBytes: Buffer.from('out'),
      stderrBytes: Buffer.from('ERR'),
    });
    assert.equal(text(out), 'out');
    assert.equal(text(err), 'ERR');
  });

  it('counts everything as stdout from a daemon without the split', () => {
    const { out, err } = splitStreams({ bytes: Buffer.from('all of it') });
    assert.equal(text(out), 'all of it');
    assert.equal(err.length, 0);
  });
});
