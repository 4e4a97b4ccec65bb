/**
 * A scheduler held in memory: a real implementation of the driver interface for tests and for
 * trying the repair loop without a cluster. Nodes out carry their reason; rankwatch's start with
 * its prefix, as in Slurm. `failNext` makes the next cordons fail as a scheduler that is down.
 */
import { RankwatchError } from '../../core/errors.js';
import {
  type CordonDriver,
  type CordonRequest,
  type ListedNode,
  type NodeOut,
  REASON_PREFIX,
} from './driver.js';

export class MemoryDriver implements CordonDriver {
  readonly type = 'memory';
  /** Nodes out of scheduling, with their reason. */
  readonly out = new Map<string, string>();
  /** Every node the scheduler knows (nodes out are known too). */
  readonly fleet = new Set<string>();
  /** The calls made, in order (`cordon HOST`, `uncordon HOST`). */
  calls: string[] = [];
  failNext = 0;

  constructor(hosts: Iterable<string> = []) {
    for (const h of hosts) this.fleet.add(h);
  }

  async cordon(r: CordonRequest): Promise<void> {
    this.calls.push(`cordon ${r.host}`);
    if (this.failNext-- > 0) throw new RankwatchError('RANKWATCH_ERR_CORDON_FAILED', 'slurmctld timed out');
    this.fleet.add(r.host);
    this.out.set(r.host, `${REASON_PREFIX} ${r.reason}`);
  }

  async uncordon(host: string): Promise<void> {
    this.calls.push(`uncordon ${host}`);
    this.out.delete(host);
  }

  async state(host: string): Promise<NodeOut> {
    const reason = this.out.get(host);
    return { out: reason !== undefined, reason, byRankwatch: reason?.startsWith(REASON_PREFIX) ?? false };
  }

  async nodes(): Promise<ListedNode[]> {
    const hosts = new Set([...this.fleet, ...this.out.keys()]);
    return Promise.all([...hosts].map(async (host) => ({ host, ...(await this.state(host)) })));
  }
}
