/**
 * kafkajs 2.2.4, its last release, re-arms a timer every millisecond on each broker connection
 * once a request was answered, while no request waits: its queue check schedules itself with a
 * negative delay (tulios/kafkajs#1556, #1604, #1704; fixed in PR #1667, never released). It costs
 * every `detect` about 50 ms of CPU per second, idle or busy, so a layout of more processes pays it
 * more often (docs/operations.md, "Capacity"). `quietRequestQueues` makes the check schedule
 * itself only while a request waits or the broker throttles this client, as that PR does; another
 * kafkajs version is left as it is.
 */
import { createRequire } from 'node:module';

/** The part of kafkajs's RequestQueue (src/network/requestQueue/index.js) the fix reads. */
export interface RequestQueueLike {
  throttledUntil: number;
  throttleCheckTimeoutId: NodeJS.Timeout | null;
  pending: unknown[];
  checkPendingRequests(): void;
}

/** kafkajs's interval between checks while requests wait (CHECK_PENDING_REQUESTS_INTERVAL). */
const CHECK_PENDING_MS = 10;

/** The queue check scheduled when a request waits (every 10 ms) or the client is throttled (at its end); else not. */
export function scheduleCheckPendingRequests(this: RequestQueueLike): void {
  if (this.throttleCheckTimeoutId) return;
  let at = this.throttledUntil - Date.now();
  if (this.pending.length > 0) at = at > 0 ? at : CHECK_PENDING_MS;
  else if (at <= 0) return;
  this.throttleCheckTimeoutId = setTimeout(() => {
    this.throttleCheckTimeoutId = null;
    this.checkPendingRequests();
  }, at);
}

let done = false;

/** Applies the fix to the kafkajs this process loads, once; true when it applies (kafkajs 2.2.4). */
export function quietRequestQueues(): boolean {
  if (done) return true;
  const require = createRequire(import.meta.url);
  const { version } = require('kafkajs/package.json') as { version: string };
  if (version !== '2.2.4') return false;
  const queue = require('kafkajs/src/network/requestQueue/index.js') as { prototype: RequestQueueLike };
  (queue.prototype as unknown as Record<string, unknown>).scheduleCheckPendingRequests =
    scheduleCheckPendingRequests;
  done = true;
  return true;
}
