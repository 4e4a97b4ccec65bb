/**
 * The cordon automation options of `up` and `detect`. Without `--cordon-driver` the health machine
 * and governor still run and audit their decisions as dry-run. Refuses at start an enabled
 * automation without a budget.
 */
import { defineOptions, type OptionValues } from '../cli/args.js';
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

export const CORDON_OPTIONS = defineOptions({
  'cordon-driver': {
    kind: 'enum',
    values: ['slurm', 'kubernetes'],
    env: 'RANKWATCH_CORDON_DRIVER',
    help: 'take unhealthy nodes out through this scheduler',
  },
  'cordon-enable': {
    kind: 'boolean',
    help: 'act (default: dry-run, decisions audited only); needs the three budget flags',
  },
  'cordon-approval': { kind: 'boolean', help: "every cordon waits for a person's approval" },
  'cordon-max-share': {
    kind: 'number',
    arg: 'F',
    help: 'at most this share of the fleet out at once (e.g. 0.05)',
  },
  'cordon-max-nodes': { kind: 'number', help: 'at most N nodes out at once' },
  'cordon-per-hour': { kind: 'number', help: 'at most N cordons in any hour' },
  'fleet-size': {
    kind: 'number',
    defaultText: "the scheduler's node count with a driver, else hosts seen in events",
    help: 'nodes in the fleet; a share that rounds to 0 nodes allows 1',
  },
  'slurm-conf': { kind: 'file', help: 'SLURM_CONF for scontrol' },
  'kube-api': {
    kind: 'url',
    defaultText: 'in-cluster service account',
    help: 'Kubernetes API server',
  },
  'kube-token': {
    kind: 'string',
    env: 'RANKWATCH_KUBE_TOKEN',
    envOnly: true,
    help: 'bearer token for --kube-api (environment only: flags show in ps)',
  },
});

export type CordonValues = OptionValues<typeof CORDON_OPTIONS>;

export function cordonDriverFrom(v: CordonValues): CordonDriver | undefined {
  const type = v['cordon-driver'];
  if (!type) return undefined;
  if (type === 'slurm') return new SlurmDriver({ slurmConf: v['slurm-conf'] });
  const api = v['kube-api'];
  return new KubernetesDriver(api ? { apiServer: api, token: v['kube-token'] } : inClusterConfig());
}

/**
 * The repair loop's decisions as the flags ask, held in memory; its rows go to `store`, the
 * findings it makes (resolved hardware, the breaker's) to `publish` and the store.
 */
export function automationFrom(
  values: CordonValues,
  store: Store | undefined,
  publish?: (fs: Finding[]) => void,
  more: Pick<AutomationOptions, 'logger' | 'journal' | 'mayAct'> = {},
): Automation {
  const given: Partial<SafetyConfig> = {
    enabled: values['cordon-enable'],
    approval: values['cordon-approval'],
  };
  const share = values['cordon-max-share'];
  const nodes = values['cordon-max-nodes'];
  const hour = values['cordon-per-hour'];
  if (share !== undefined) given.maxShare = share;
  if (nodes !== undefined) given.maxNodes = nodes;
  if (hour !== undefined) given.perHour = hour;
  const fleet = values['fleet-size'];
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
  values: CordonValues,
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
