/**
 * One refused event must not cost its batch. When the bus refuses what it was given
 * (RANKWATCH_ERR_TRANSPORT_REJECTED: a Kafka message over max.message.bytes, say), the batches are
 * halved until the refused event stands alone; it is handed to `onRefused` with the bus's reason
 * and everything else is published. Any other error (the bus is away) propagates untouched, so
 * the caller keeps the batch. Parts published before such an error come again with it (at least
 * once; the store keeps one copy).
 */
import { RankwatchError } from '../core/errors.js';
import type { Batch, Publisher } from './transport.js';

export function isRefusal(err: unknown): boolean {
  return err instanceof RankwatchError && err.code === 'RANKWATCH_ERR_TRANSPORT_REJECTED';
}

export async function publishIsolating(
  publisher: Publisher,
  batches: Batch[],
  onRefused: (event: unknown, reason: string) => void,
): Promise<void> {
  // Told only once every part went through: when an outage cuts the publish short, the caller
  // keeps the whole batch, refused events included, and they are refused (and counted) on the
  // retry. Telling now as well would count them twice.
  const refused: [unknown, string][] = [];
  await isolate(publisher, batches, refused);
  for (const [event, reason] of refused) onRefused(event, reason);
}

async function isolate(publisher: Publisher, batches: Batch[], refused: [unknown, string][]): Promise<void> {
  try {
    await publisher.publish(batches);
  } catch (err) {
    if (!isRefusal(err)) throw err;
    const events = batches.reduce((n, b) => n + b.events.length, 0);
    if (events <= 1) {
      for (const b of batches) for (const e of b.events) refused.push([e, (err as Error).message]);
      return;
    }
    const [a, b] = halve(batches);
    await isolate(publisher, a, refused);
    await isolate(publisher, b, refused);
  }
}

function halve(batches: Batch[]): [Batch[], Batch[]] {
  if (batches.length > 1) {
    const m = batches.length >> 1;
    return [batches.slice(0, m), batches.slice(m)];
  }
  const [{ key, events }] = batches;
  const m = events.length >> 1;
  return [[{ key, events: events.slice(0, m) }], [{ key, events: events.slice(m) }]];
}
