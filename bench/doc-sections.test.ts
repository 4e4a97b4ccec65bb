/** `npm run bench -- NAME` rewrites its generated text in docs/benchmarks.md and nothing written by hand. */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { docSections, updateDoc } from './doc-sections.js';

const ORDER = ['replay', 'detect', 'sharded'];
const HEADER = '# Benchmarks\n\nWritten by `npm run bench`.\n';

const DOC = `# Benchmarks

Intro written by hand.

<!-- bench:replay -->
## Replay

| measurement | per second |
| --- | ---: |
| old | 1 events/s |
<!-- bench:replay:end -->

Instruction counts, taken by hand (cachegrind): 2.18 G a pass.

<!-- bench:detect -->
## Detectors: old
<!-- bench:detect:end -->

<!-- bench:sharded -->
## Sharded: old
<!-- bench:sharded:end -->

Closing paragraph.
`;

describe('the benchmarks doc updater', () => {
  it("replaces only the rerun section's generated text; the prose after its table and the other sections stay", () => {
    const out = updateDoc(DOC, new Map([['replay', '## Replay\n\n| new | 2 events/s |']]), ORDER, HEADER);
    expect(out).toBe(
      DOC.replace(
        '| measurement | per second |\n| --- | ---: |\n| old | 1 events/s |',
        '| new | 2 events/s |',
      ),
    );
    expect(out).toContain('Instruction counts, taken by hand (cachegrind): 2.18 G a pass.');
  });

  it('does the same for every section: the last one keeps the paragraph after it', () => {
    const fresh = new Map(ORDER.map((n) => [n, `## ${n}: new`]));
    const out = updateDoc(DOC, fresh, ORDER, HEADER);
    expect(out).toContain('Intro written by hand.');
    expect(out).toContain('<!-- bench:replay:end -->\n\nInstruction counts, taken by hand');
    expect(out).toContain(
      '<!-- bench:sharded -->\n## sharded: new\n<!-- bench:sharded:end -->\n\nClosing paragraph.\n',
    );
    expect(out).not.toContain('old');
    // Rerunning with the same text changes nothing.
    expect(updateDoc(out, fresh, ORDER, HEADER)).toBe(out);
  });

  it('puts a section the doc lacks in bench order, after the hand-written text of the one before', () => {
    const doc = DOC.replace(/<!-- bench:detect -->[\s\S]*?<!-- bench:detect:end -->\n\n/, '');
    const out = updateDoc(doc, new Map([['detect', '## Detectors: new']]), ORDER, HEADER);
    expect(out).toContain(
      'a pass.\n\n<!-- bench:detect -->\n## Detectors: new\n<!-- bench:detect:end -->\n\n<!-- bench:sharded -->',
    );
  });

  it('starts an empty doc with the header, sections in bench order', () => {
    const out = updateDoc(
      '',
      new Map([
        ['sharded', 'S'],
        ['replay', 'R'],
      ]),
      ORDER,
      HEADER,
    );
    expect(out).toBe(
      `${HEADER}\n<!-- bench:replay -->\nR\n<!-- bench:replay:end -->\n\n<!-- bench:sharded -->\nS\n<!-- bench:sharded:end -->\n`,
    );
  });

  it('refuses markers it cannot pair, naming the one at fault', () => {
    // A doc from before end markers: its sections ran to the next start, hand-written text with them.
    const old = '<!-- bench:replay -->\n## Replay\n\nprose\n\n<!-- bench:detect -->\n## Detectors\n';
    expect(() => updateDoc(old, new Map([['replay', 'R']]), ORDER, HEADER)).toThrow(
      '<!-- bench:replay --> has no <!-- bench:replay:end --> before <!-- bench:detect -->',
    );
    expect(() => docSections('<!-- bench:detect -->\nD\n')).toThrow(
      '<!-- bench:detect --> has no <!-- bench:detect:end --> after it',
    );
    expect(() => docSections('x\n<!-- bench:detect:end -->\n')).toThrow(
      '<!-- bench:detect:end --> has no <!-- bench:detect --> before it',
    );
    expect(() => docSections(`${DOC}\n<!-- bench:detect -->\nD\n<!-- bench:detect:end -->\n`)).toThrow(
      '<!-- bench:detect --> is there twice',
    );
  });

  it("reads docs/benchmarks.md as it is: every bench's section paired, the replay prose outside the markers", () => {
    const doc = readFileSync(join(import.meta.dirname, '..', 'docs', 'benchmarks.md'), 'utf8');
    const spans = docSections(doc);
    expect([...spans.keys()]).toContain('replay');
    const replay = spans.get('replay')!;
    expect(doc.slice(replay.from, replay.to)).not.toContain('Instruction counts');
    expect(doc.slice(replay.to)).toContain('Instruction counts, which load does not move');
  });
});
