/**
 * The cordon automation flags of `up` and `detect` (and the environment). Without
 * `--cordon-driver` the health machine and governor still run and audit their decisions as
 * dry-run. Refuses at start an enabled automation without a budget.
 */
import { RankwatchError } from '../core/errors.js';
import type { Logger } from '../core/log.js';
import type { Finding } from '../schema/finding.js';
import { outputRows } from '../store/rows.js';
import type { Store } from '../store/store.js';
import { Automation, type AutomationOptions } from './automation.js';
import type { CordonDriver } from './drivers/driver.js';
import { inClusterConfig, KubernetesDriver } from './drivers/kubernetes.js';
import { SlurmDriver } from './drivers/slurm.js';
import { type SafetyConfig, safetyConfig } from './governor.js';
import { durableParts, RepairLoop } from './leader.js';
import { StoreFeed } from './store-feed.js';

export const CORDON_FLAGS = {
  'cordon-driver': { type: 'string' },
  'cordon-enable': { type: 'boolean' },
  'cordon-approval': { type: 'boolean' },
  'cordon-max-share': { type: 'string' },
  'cordon-max-nodes': { type: 'string' },
  'cordon-per-hour': { type: 'string' },
  'fleet-size': { type: 'string' },
  'slurm-conf': { type: 'string' },
  'kube-api': { type: 'string' },
} as const;

export const CORDON_FLAGS_HELP = `  --cordon-driver slurm|kubernetes  take unhealthy nodes out through this scheduler [RANKWATCH_CORDON_DRIVER]
  --cordon-enable           act (default: dry-run, decisions audited only); needs the three budget flags
  --cordon-approval         every cordon waits for a person's approval
  --cordon-max-share F      at most this share of the fleet out at once (e.g. 0.05)
  --cordon-max-nodes N      at most N nodes out at once
  --cordon-per-hour N       at most N cordons in any hour
  --fleet-size N            nodes in the fleet (default: the scheduler's node count with a driver,
                            else hosts seen in events); a share that rounds to 0 nodes allows 1
  --slurm-conf FILE         SLURM_CONF for scontrol
  --kube-api URL            Kubernetes API server (default: in-cluster service account)`;

function number(v: unknown, flag: string): number | undefined {
  if (v === undefined) return undefined;
  const n = Number(v);
  if (!Number.isFinite(n))
    throw new RankwatchError('RANKWATCH_ERR_USAGE', `--${flag} needs a number, got "${v}"`);
  return n;
}

export function cordonDriverFrom(
  values: Record<string, unknown>,
  env: NodeJS.ProcessEnv = process.env,
): CordonDriver | undefined {
  const type = (values['cordon-driver'] as string | undefined) ?? env.RANKWATCH_CORDON_DRIVER;
  if (!type) return undefined;
  if (type === 'slurm') return new SlurmDriver({ slurmConf: values['slurm-conf'] as string | undefined });
  if (type === 'kubernetes') {
    const api = values['kube-api'] as string | undefined;
    return new KubernetesDriver(
      api ? { apiServer: api, token: env.RANKWATCH_KUBE_TOKEN } : inClusterConfig(),
    );
  }
  throw new RankwatchError('RANKWATCH_ERR_USAGE', `--cordon-driver is slurm or kubernetes, got "${type}"`);
}

/**
 * The repair loop's decisions as the flags ask, held in memory; its rows go to `store`, the
 * findings it makes (resolved hardware, the breaker's) to `publish` and the store.
 */
export function automationFrom(
  values: Record<string, unknown>,
  store: Store | undefined,
  publish?: (fs: Finding[]) => void,
  more: Pick<AutomationOptions, 'logger' | 'journal' | 'mayAct'> = {},
): Automation {
  const given: Partial<SafetyConfig> = {
    enabled: values['cordon-enable'] === true,
    approval: values['cordon-approval'] === true,
  };
  const share = number(values['cordon-max-share'], 'cordon-max-share');
  const nodes = number(values['cordon-max-nodes'], 'cordon-max-nodes');
  const hour = number(values['cordon-per-hour'], 'cordon-per-hour');
  if (share !== undefined) given.maxShare = share;
  if (nodes !== undefined) given.maxNodes = nodes;
  if (hour !== undefined) given.perHour = hour;
  const fleet = number(values['fleet-size'], 'fleet-size');
  return new Automation({
    driver: cordonDriverFrom(values),
    safety: safetyConfig(given),
    fleetSize: fleet === undefined ? undefined : () => fleet,
    record: store ? (batches) => store.insert(batches) : undefined,
    publish: (fs) => {
      publish?.(fs);
      store?.insert([outputRows({ findings: fs, mfu: [], rollups: [] })[0]]).catch(() => undefined);
    },
    ...more,
  });
}

/**
 * The durable repair loop `up` and `detect` run: state in `store`, behind the leader lease. With
 * `shared` (a ClickHouse server other processes write to) it reads its inputs back from the store
 * and competes for the lease; otherwise (chDB: one process per folder) it takes the lease at once
 * and is fed by its own pipeline.
 */
export function repairLoopFrom(
  values: Record<string, unknown>,
  store: Store,
  o: { logger: Logger; publish?: (fs: Finding[]) => void; shared: boolean },
): RepairLoop {
  const { journal, lease } = durableParts(store, !o.shared);
  const automation = automationFrom(values, store, o.publish, {
    logger: o.logger,
    journal,
    mayAct: () => lease.holds(),
  });
  return new RepairLoop({
    automation,
    store,
    journal,
    lease,
    logger: o.logger,
    feed: o.shared ? new StoreFeed(store, automation) : undefined,
  });
}
