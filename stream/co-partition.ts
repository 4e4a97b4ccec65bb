/**
 * Co-partitioned assignment, for the job stages of the sharded layout (docs/kafka.md, "Several job
 * stages"). A job stage reads the job-keyed events and its shards' records, both keyed by job with
 * the same partitioner and partition count, through two consumer groups. Kafka assigns each
 * group's partitions on its own, so with two job stages a job's events could go to one and its
 * records to the other. Here every member says which process it belongs to, and each group gives
 * partition p to the same process: the p-th modulo the processes, sorted by name. While the two
 * groups disagree (one has rebalanced, the other not yet) a job's records may reach the process
 * that is losing it; they are committed there and replayed by the new owner when its records
 * partition comes (KafkaTransport's replay on assignment).
 */
import { AssignerProtocol, type PartitionAssigner } from 'kafkajs';

const NAME = 'RankwatchCoPartitioned';
const VERSION = 1;

/** An assigner for the consumers of one process (`processName`, the same for both of its groups). */
export function coPartitioned(processName: string): PartitionAssigner {
  return ({ cluster }) => ({
    name: NAME,
    version: VERSION,
    protocol: ({ topics }) => ({
      name: NAME,
      metadata: AssignerProtocol.MemberMetadata.encode({
        version: VERSION,
        topics,
        userData: Buffer.from(processName),
      }),
    }),
    async assign({ members, topics }) {
      const named = members
        .map((m) => ({
          memberId: m.memberId,
          process:
            AssignerProtocol.MemberMetadata.decode(m.memberMetadata)?.userData?.toString() || m.memberId,
        }))
        .sort((a, b) => compare(a.process, b.process) || compare(a.memberId, b.memberId));
      const assignment = named.map(() => ({}) as Record<string, number[]>);
      for (const topic of topics)
        for (const { partitionId } of cluster.findTopicPartitionMetadata(topic)) {
          const to = assignment[partitionId % named.length];
          to[topic] = [...(to[topic] ?? []), partitionId];
        }
      return named.map((m, i) => ({
        memberId: m.memberId,
        memberAssignment: AssignerProtocol.MemberAssignment.encode({
          version: VERSION,
          assignment: assignment[i],
          userData: Buffer.alloc(0),
        }),
      }));
    },
  });
}

const compare = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);
