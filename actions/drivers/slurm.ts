/**
 * Slurm through `scontrol`: drain with a reason that starts with "rankwatch:", resume, and read a
 * node's state and reason back from `scontrol show node -o`. A failed command is a retriable
 * CORDON_FAILED (slurmctld down, timeout) unless scontrol says the node does not exist.
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { RankwatchError } from '../../core/errors.js';
import { type CordonDriver, type CordonRequest, type NodeOut, REASON_PREFIX } from './driver.js';

const run = promisify(execFile);

export interface SlurmConfig {
  /** The scontrol binary (default from PATH). */
  scontrol: string;
  /** SLURM_CONF for scontrol; the environment's when unset. */
  slurmConf?: string;
  timeoutMs: number;
}

export const SLURM_DEFAULTS: SlurmConfig = { scontrol: 'scontrol', timeoutMs: 15_000 };

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

  private async scontrol(args: string[]): Promise<string> {
    const env = this.cfg.slurmConf ? { ...process.env, SLURM_CONF: this.cfg.slurmConf } : process.env;
    try {
      // execFile, never a shell: the reason is one argument whatever it contains.
      const { stdout } = await run(this.cfg.scontrol, args, { env, timeout: this.cfg.timeoutMs });
      return stdout;
    } catch (err) {
      const msg = `${(err as { stderr?: string }).stderr ?? ''}`.trim() || (err as Error).message;
      const code = /invalid node name|not found/i.test(msg)
        ? 'RANKWATCH_ERR_CORDON_REFUSED'
        : 'RANKWATCH_ERR_CORDON_FAILED';
      throw new RankwatchError(code, `scontrol ${args.slice(0, 2).join(' ')} failed: ${msg.slice(0, 300)}`, {
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
  const out = /DRAIN|DOWN|FAIL/i.test(state);
  return { out, reason, byRankwatch: out && (reason?.startsWith(REASON_PREFIX) ?? false) };
}
