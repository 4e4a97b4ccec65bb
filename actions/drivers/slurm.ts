/**
 * Slurm through `scontrol`: drain with a reason that starts with "rankwatch:", resume, and read a
 * node's state and reason back from `scontrol show node -o`; the whole cluster's nodes, states and
 * reasons from `sinfo --Node`. A failed command is a retriable CORDON_FAILED (slurmctld down,
 * timeout) unless scontrol says the node does not exist.
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { RankwatchError } from '../../core/errors.js';
import {
  type CordonDriver,
  type CordonRequest,
  type ListedNode,
  type NodeOut,
  REASON_PREFIX,
} from './driver.js';

const run = promisify(execFile);

export interface SlurmConfig {
  /** The scontrol binary (default from PATH). */
  scontrol: string;
  /** The sinfo binary (default from PATH). */
  sinfo: string;
  /** SLURM_CONF for scontrol; the environment's when unset. */
  slurmConf?: string;
  timeoutMs: number;
}

export const SLURM_DEFAULTS: SlurmConfig = { scontrol: 'scontrol', sinfo: 'sinfo', timeoutMs: 15_000 };

/** One line per node and partition: name, long state, reason last (a reason may hold the separator). */
export const SINFO_ARGS = ['--noheader', '--Node', '--format', '%N|%T|%E'];

export class SlurmDriver implements CordonDriver {
  readonly type = 'slurm';
  private readonly cfg: SlurmConfig;

  constructor(cfg: Partial<SlurmConfig> = {}) {
    this.cfg = { ...SLURM_DEFAULTS, ...cfg };
  }

  async cordon(r: CordonRequest): Promise<void> {
    // Slurm keeps the reason as one string; newlines and quotes would garble `sinfo -R`.
    const reason = `${REASON_PREFIX} ${r.reason}`.replace(/[\r\n"]+/g, ' ').slice(0, 200);
    await this.scontrol(['update', `nodename=${node(r.host)}`, 'state=drain', `reason=${reason}`]);
  }

  async uncordon(host: string): Promise<void> {
    await this.scontrol(['update', `nodename=${node(host)}`, 'state=resume']);
  }

  async state(host: string): Promise<NodeOut> {
    const out = await this.scontrol(['show', 'node', node(host), '-o']);
    return parseShowNode(out);
  }

  async nodes(): Promise<ListedNode[]> {
    return parseSinfoNodes(await this.scontrol(SINFO_ARGS, this.cfg.sinfo));
  }

  private async scontrol(args: string[], bin = this.cfg.scontrol): Promise<string> {
    const env = this.cfg.slurmConf ? { ...process.env, SLURM_CONF: this.cfg.slurmConf } : process.env;
    try {
      // execFile, never a shell: the reason is one argument whatever it contains.
      const { stdout } = await run(bin, args, { env, timeout: this.cfg.timeoutMs });
      return stdout;
    } catch (err) {
      const msg = `${(err as { stderr?: string }).stderr ?? ''}`.trim() || (err as Error).message;
      const code = /invalid node name|not found/i.test(msg)
        ? 'RANKWATCH_ERR_CORDON_REFUSED'
        : 'RANKWATCH_ERR_CORDON_FAILED';
      const what = bin === this.cfg.scontrol ? `scontrol ${args.slice(0, 2).join(' ')}` : 'sinfo';
      throw new RankwatchError(code, `${what} failed: ${msg.slice(0, 300)}`, {
        cause: err,
      });
    }
  }
}

/** Node names are passed as one argument; refuse anything that could be read as a host list or option. */
function node(host: string): string {
  if (!/^[A-Za-z0-9][A-Za-z0-9._-]*$/.test(host))
    throw new RankwatchError(
      'RANKWATCH_ERR_CORDON_REFUSED',
      `"${host}" is not a Slurm node name rankwatch will touch`,
    );
  return host;
}

/** `scontrol show node X -o`: State=IDLE+DRAIN … Reason=text [user@time] */
export function parseShowNode(text: string): NodeOut {
  const state = /\bState=(\S+)/.exec(text)?.[1] ?? '';
  const reasonMatch = /\bReason=(.*?)(?:\s+\[[^\]]*\])?\s*$/m.exec(text);
  const reason = reasonMatch?.[1]?.trim() || undefined;
  return nodeOut(state, reason);
}

/** Out of scheduling: drained or draining, down, failed or failing (any suffix such as `*`). */
const OUT_STATE = /DRAIN|DOWN|FAIL/i;

function nodeOut(state: string, reason: string | undefined): NodeOut {
  const out = OUT_STATE.test(state);
  return { out, reason, byRankwatch: out && (reason?.startsWith(REASON_PREFIX) ?? false) };
}

/**
 * `sinfo --noheader --Node --format '%N|%T|%E'`: one line per node and partition (a node in two
 * partitions is listed twice, once kept here), the reason last and whole, `none` when there is
 * none. A line cut before its state is skipped; a line cut inside its reason keeps what is there.
 */
export function parseSinfoNodes(text: string): ListedNode[] {
  const nodes = new Map<string, ListedNode>();
  for (const raw of text.split('\n')) {
    const line = raw.replace(/\r$/, '');
    const a = line.indexOf('|');
    const b = a < 0 ? -1 : line.indexOf('|', a + 1);
    const host = line.slice(0, a < 0 ? line.length : a).trim();
    const state = a < 0 ? '' : line.slice(a + 1, b < 0 ? line.length : b).trim();
    if (!host || !state || nodes.has(host)) continue;
    const text = b < 0 ? '' : line.slice(b + 1).trim();
    nodes.set(host, { host, ...nodeOut(state, text && text !== 'none' ? text : undefined) });
  }
  return [...nodes.values()];
}
