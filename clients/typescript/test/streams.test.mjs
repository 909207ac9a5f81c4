// The split of a session output window into stdout and stderr by the
// daemon's stderr ranges (absolute offsets), as the provider's exec results
// use it; without ranges everything is stdout.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import { splitStreams } from '../dist/agents/index.js';

const text = (parts) => Buffer.concat(parts).toString();

describe('splitStreams', () => {
  it('splits a window by absolute stderr ranges', () => {
    // window "outERRout2ERR2" starting at offset 100
    const bytes = Buffer.from('outERRout2ERR2');
    const { out, err } = splitStreams(bytes, 100, [
      [103, 106],
      [110, 114],
    ]);
    assert.equal(text(out), 'outout2');
    assert.equal(text(err), 'ERRERR2');
  });

  it('clips ranges that start before or end after the window', () => {
    const bytes = Buffer.from('RRout');
    const { out, err } = splitStreams(bytes, 50, [
      [40, 52],
      [60, 70],
    ]);
    assert.equal(text(out), 'out');
    assert.equal(text(err), 'RR');
  });

  it('counts everything as stdout without ranges (an older daemon)', () => {
    const { out, err } = splitStreams(Buffer.from('all of it'), 0, undefined);
    assert.equal(text(out), 'all of it');
    assert.equal(err.length, 0);
  });
});
