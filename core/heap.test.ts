import { spawnSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { HEAP_GROWING_PERCENT, heapGrowthFlag } from './heap.js';

describe('heap growth bound', () => {
  it('bounds the old generation by default, or as RANKWATCH_HEAP_GROWING_PERCENT says', () => {
    expect(heapGrowthFlag([], undefined)).toBe(`--heap-growing-percent=${HEAP_GROWING_PERCENT}`);
    expect(heapGrowthFlag(['--enable-source-maps'])).toBe(`--heap-growing-percent=${HEAP_GROWING_PERCENT}`);
    expect(heapGrowthFlag([], 100)).toBe('--heap-growing-percent=100');
    expect(heapGrowthFlag([], 0)).toBeUndefined(); // V8's own policy
  });

  it("leaves node's own flag alone, spelled with - or _", () => {
    expect(heapGrowthFlag(['--heap-growing-percent=200'], 30)).toBeUndefined();
    expect(heapGrowthFlag(['--heap_growing_percent=10'], undefined)).toBeUndefined();
  });

  it('is a flag this node accepts', () => {
    // A flag V8 does not know would make the bound silently do nothing; node refuses one on its command line.
    const r = spawnSync(process.execPath, [`--heap-growing-percent=${HEAP_GROWING_PERCENT}`, '-e', ''], {
      encoding: 'utf8',
    });
    expect(r.status).toBe(0);
    expect(r.stderr).toBe('');
    const bad = spawnSync(process.execPath, ['--heap-growing-percentage=50', '-e', ''], { encoding: 'utf8' });
    expect(bad.status).not.toBe(0);
  });
});
