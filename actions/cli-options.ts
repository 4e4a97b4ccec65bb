/**
 * The cordon automation flags of `up` (and the environment). Without `--cordon-driver` the
 * health machine and governor still run and audit their decisions as dry-run. Refuses at start
 * an enabled automation without a budget.
 */
import { RankwatchError } from '../core/errors.js';
import type { Finding } from '../schema/finding.js';
import { outputRows } from '../store/rows.js';
import type { Store } from '../store/store.js';
import { Automation } from './automation.js';
import type { CordonDriver } from './drivers/driver.js';
import { inClusterConfig, KubernetesDriver } from './drivers/kubernetes.js';
import { SlurmDriver } from './drivers/slurm.js';
import { type SafetyConfig, safetyConfig } from './governor.js';

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
  --fleet-size N            nodes in the fleet (default: hosts seen in events so far)
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

/** The repair loop as the flags ask; its rows go to `store`, resolved hardware findings to `onResolved`. */
export function automationFrom(
  values: Record<string, unknown>,
  store: Store | undefined,
  onResolved?: (fs: Finding[]) => void,
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
    onResolved: (fs) => {
      onResolved?.(fs);
      store?.insert([outputRows({ findings: fs, mfu: [], rollups: [] })[0]]).catch(() => undefined);
    },
  });
}
