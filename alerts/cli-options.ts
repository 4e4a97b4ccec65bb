/**
 * The alerting flags `up` and `detect` share; each falls back to the environment. With none set,
 * no alerting runs.
 */
import { RankwatchError } from '../core/errors.js';
import type { DeadLetter } from '../store/rows.js';
import { Alerting } from './alerting.js';

export const ALERT_FLAGS = {
  'alertmanager-url': { type: 'string' },
  'alert-webhook': { type: 'string' },
  'alert-webhook-secret': { type: 'string' },
  'alert-link-base': { type: 'string' },
} as const;

export const ALERT_FLAGS_HELP = `  --alertmanager-url URL    send open findings (warning, critical) to Alertmanager's v2 API [RANKWATCH_ALERTMANAGER_URL]
  --alert-webhook URL       also POST each finding event as signed JSON (comma-separated)   [RANKWATCH_ALERT_WEBHOOK]
  --alert-webhook-secret S  HMAC-SHA256 secret for x-rankwatch-signature                 [RANKWATCH_ALERT_WEBHOOK_SECRET]
  --alert-link-base URL     base of the finding link in alerts (e.g. http://rankwatch:7070)  [RANKWATCH_ALERT_LINK_BASE]`;

function url(v: string, flag: string): string {
  try {
    const u = new URL(v);
    if (u.protocol === 'http:' || u.protocol === 'https:') return v;
  } catch {}
  throw new RankwatchError('RANKWATCH_ERR_USAGE', `--${flag} needs an http(s) URL, got "${v}"`);
}

/** Alerting as the flags (then the environment) ask, started; undefined when nothing asks. */
export function alertingFrom(
  values: Record<string, unknown>,
  env: NodeJS.ProcessEnv = process.env,
  onDeadLetter?: (d: DeadLetter) => void,
): Alerting | undefined {
  const am = (values['alertmanager-url'] as string | undefined) ?? env.RANKWATCH_ALERTMANAGER_URL;
  const hooks =
    (values['alert-webhook'] as string[] | undefined) ??
    (env.RANKWATCH_ALERT_WEBHOOK ? env.RANKWATCH_ALERT_WEBHOOK.split(',') : []);
  if (!am && hooks.length === 0) return undefined;
  const secret = (values['alert-webhook-secret'] as string | undefined) ?? env.RANKWATCH_ALERT_WEBHOOK_SECRET;
  const linkBase = (values['alert-link-base'] as string | undefined) ?? env.RANKWATCH_ALERT_LINK_BASE;
  const a = new Alerting(
    {
      alertmanager: am ? { url: url(am, 'alertmanager-url'), linkBase } : undefined,
      webhooks: hooks.map((h, i) => ({
        name: `webhook-${i + 1}`,
        url: url(h.trim(), 'alert-webhook'),
        secret,
      })),
    },
    onDeadLetter,
  );
  a.start();
  return a;
}
