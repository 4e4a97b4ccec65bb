/**
 * A p2p transfer's other end where the node collector that sent it could not name it: the peer
 * runs on another node, so collectors/reduce.ts sends its rank in the communicator
 * (`peer_comm_rank`) and this rank's own (`comm_rank`). Both ends report on the same communicator
 * id, so the peer is the member the communicator's other events place at that rank; on a two-rank
 * communicator (ProcessGroupNCCL's send/recv pairs), the one other member seen. Until the peer's
 * own events came, the transfer stays unnamed. Bounded: at most `maxComms` communicators (oldest
 * forgotten).
 */
import type { CollectiveEvent } from '../../schema/events.js';

interface Member {
  rank: number;
  host?: string;
}

interface Comm {
  byCommRank: Map<number, Member>;
  /** Global ranks seen on it, for two-rank communicators (at most two kept). */
  seen: Member[];
}

export class CommPeers {
  private readonly comms = new Map<string, Comm>();

  constructor(private readonly maxComms = 65_536) {}

  /** Learns from a p2p event, and returns its peer: the one it names, or the one the communicator's members say. */
  peerOf(e: CollectiveEvent): Member | undefined {
    const x = e as CollectiveEvent & { comm_rank?: number; peer_comm_rank?: number };
    // A named peer with nothing to teach (the native path): no state kept for its communicator.
    if (e.peer !== undefined && x.comm_rank === undefined) return { rank: e.peer, host: e.peer_host };
    const c = this.comm(e.comm);
    if (x.comm_rank !== undefined) c.byCommRank.set(x.comm_rank, { rank: e.rank, host: e.host });
    if (c.seen.length < 2 && !c.seen.some((m) => m.rank === e.rank))
      c.seen.push({ rank: e.rank, host: e.host });
    if (e.peer !== undefined) {
      if (e.peer_host !== undefined && c.seen.length < 2 && !c.seen.some((m) => m.rank === e.peer))
        c.seen.push({ rank: e.peer, host: e.peer_host });
      return { rank: e.peer, host: e.peer_host };
    }
    if (x.peer_comm_rank === undefined) return undefined;
    const named = c.byCommRank.get(x.peer_comm_rank);
    if (named) return named;
    return e.nranks === 2 && c.seen.length === 2 ? c.seen.find((m) => m.rank !== e.rank) : undefined;
  }

  private comm(id: string): Comm {
    let c = this.comms.get(id);
    if (!c) {
      if (this.comms.size >= this.maxComms) this.comms.delete(this.comms.keys().next().value as string);
      c = { byCommRank: new Map(), seen: [] };
      this.comms.set(id, c);
    }
    return c;
  }
}
