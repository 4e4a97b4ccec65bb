import { spawnSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { HEAP_GROWING_PERCENT, heapGrowthFlag } from './heap.js';

describe('heap growth bound', () => {
  it('bounds the old generation unless node was told otherwise', () => {
    expect(heapGrowthFlag([], undefined)).toBe(`--heap-growing-percent=${HEAP_GROWING_PERCENT}`);
    expect(heapGrowthFlag(['--enable-source-maps'], '--max-old-space-size=4096')).toBeDefined();
  });

  it("leaves a user's own setting alone, in argv or NODE_OPTIONS, spelled with - or _", () => {
    expect(heapGrowthFlag(['--heap-growing-percent=200'], undefined)).toBeUndefined();
    expect(heapGrowthFlag([], '--inspect --heap_growing_percent=10')).toBeUndefined();
    expect(heapGrowthFlag(['--heap-growing-percent', '30'], undefined)).toBeUndefined();
  });

  it('is a flag this node accepts', () => {
    // A flag V8 does not know is ignored with a warning on stderr: the bound would silently do nothing.
    const r = spawnSync(process.execPath, [`--heap-growing-percent=${HEAP_GROWING_PERCENT}`, '-e', ''], {
      encoding: 'utf8',
    });
    expect(r.status).toBe(0);
    expect(r.stderr).toBe('');
    const bad = spawnSync(process.execPath, ['--heap-growing-percentage=50', '-e', ''], { encoding: 'utf8' });
    expect(bad.status).not.toBe(0);
  });
});
