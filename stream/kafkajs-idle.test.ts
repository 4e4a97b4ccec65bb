import { createRequire } from 'node:module';
import { afterEach, describe, expect, it } from 'vitest';
import { quietRequestQueues, type RequestQueueLike } from './kafkajs-idle.js';

const require = createRequire(import.meta.url);
// kafkajs's own request queue (one per broker connection), patched as `detect` runs it.
type Queue = RequestQueueLike & { maxInFlightRequests: number; destroy(): void };
const RequestQueue = require('kafkajs/src/network/requestQueue/index.js') as new (o: object) => Queue;
const logger = { debug: () => {}, warn: () => {}, info: () => {}, error: () => {} };

describe('kafkajs idle request queues (tulios/kafkajs#1556)', () => {
  const queues: Queue[] = [];
  const queue = (maxInFlightRequests?: number) => {
    const q = new RequestQueue({ maxInFlightRequests, requestTimeout: 30_000, broker: 'b', logger });
    queues.push(q);
    return q;
  };
  afterEach(() => {
    for (const q of queues.splice(0)) q.destroy();
  });

  it('applies to the kafkajs this project runs', () => {
    expect(require('kafkajs/package.json').version).toBe('2.2.4');
    expect(quietRequestQueues()).toBe(true);
  });

  it('arms no timer once answered with nothing waiting (unpatched: one every millisecond, forever)', () => {
    quietRequestQueues();
    const q = queue();
    // What an answer from the broker does (fulfillRequest) with nothing else queued.
    q.checkPendingRequests();
    expect(q.throttleCheckTimeoutId).toBeNull();
  });

  it('still checks again while a request waits for a free slot, and at the end of a throttle', () => {
    quietRequestQueues();
    const waiting = queue(0);
    waiting.pending.push({});
    waiting.checkPendingRequests();
    expect(waiting.throttleCheckTimeoutId).not.toBeNull();
    const throttled = queue();
    throttled.throttledUntil = Date.now() + 60_000;
    throttled.checkPendingRequests();
    expect(throttled.throttleCheckTimeoutId).not.toBeNull();
  });
});
