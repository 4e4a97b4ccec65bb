/** Has a consumer group committed everything in a topic? Shared by the soak paths and the Kafka tests. */
import { Kafka, logLevel } from 'kafkajs';

/** The group's committed offsets have reached the end of every partition of the topic. */
export async function caughtUp(brokers: string[], group: string, topic: string): Promise<boolean> {
  const admin = new Kafka({ brokers, logLevel: logLevel.NOTHING }).admin();
  await admin.connect();
  try {
    const ends = await admin.fetchTopicOffsets(topic);
    const got = await admin.fetchOffsets({ groupId: group, topics: [topic] });
    const committed = new Map(got[0].partitions.map((p) => [p.partition, Number(p.offset)]));
    return ends.every((e) => Number(e.high) === 0 || (committed.get(e.partition) ?? -1) >= Number(e.high));
  } finally {
    await admin.disconnect();
  }
}
