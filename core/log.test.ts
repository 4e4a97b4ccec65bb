/**
 * The text log keeps each event on one line: an error logged as one (a 500's details) carries its
 * message, code and where it came from; a warning with an error carries only its message.
 */
import { describe, expect, it } from 'vitest';
import { RankwatchError } from './errors.js';
import { createLogger } from './log.js';

describe('text log lines', () => {
  it('an error keeps its message, code and first frames on one line', () => {
    const lines: string[] = [];
    const log = createLogger('rankwatch test', { format: 'text', write: (l) => lines.push(l) });
    const err = new RankwatchError('RANKWATCH_ERR_STORE_QUERY', 'chDB at /d: query failed: Code: 62.');
    log.child({ reqId: 'r1' }).error({ err }, 'request failed');
    log.warn({ err }, 'store failing');
    expect(lines).toHaveLength(2);
    const [failed, warned] = lines;
    expect(failed.split('\n').filter(Boolean)).toHaveLength(1);
    expect(failed).toMatch(
      /^\S+ ERROR rankwatch test: request failed reqId="r1" err="chDB at \/d: query failed: Code: 62\." code="RANKWATCH_ERR_STORE_QUERY" stack="at .*log\.test\.ts/,
    );
    expect(warned).toMatch(
      /WARN rankwatch test: store failing err="chDB at \/d: query failed: Code: 62\." code="RANKWATCH_ERR_STORE_QUERY"\n$/,
    );
  });
});
