/**
 * The alerting flags `up` and `detect` share; each falls back to the environment. With none set,
 * no alerting runs.
 */
import { RankwatchError } from '../core/errors.js';
import type { DeadLetter } from '../store/rows.js';
import { Alerting, type AlertRoute } from './alerting.js';

export const ALERT_FLAGS = {
  'alertmanager-url': { type: 'string' },
  'alert-webhook': { type: 'string' },
  'alert-webhook-secret': { type: 'string' },
  'alert-link-base': { type: 'string' },
  'alert-routes': { type: 'string' },
} as const;

export const ALERT_FLAGS_HELP = `  --alertmanager-url URL    send open findings (warning, critical) to Alertmanager's v2 API [RANKWATCH_ALERTMANAGER_URL]
  --alert-webhook URL       also POST each finding event as signed JSON (comma-separated)   [RANKWATCH_ALERT_WEBHOOK]
  --alert-webhook-secret S  HMAC-SHA256 secret for x-rankwatch-signature                 [RANKWATCH_ALERT_WEBHOOK_SECRET]
  --alert-link-base URL     base of the finding link in alerts (e.g. http://rankwatch:7070)  [RANKWATCH_ALERT_LINK_BASE]
  --alert-routes JSON       routes, first match wins, e.g. '[{"severities":["critical"],"sinks":["alertmanager","webhook-1"]},{"types":["throttle"],"sinks":["webhook-1"]}]'
                            (default: warning and critical to every sink)             [RANKWATCH_ALERT_ROUTES]`;

function url(v: string, flag: string): string {
  try {
    const u = new URL(v);
    if (u.protocol === 'http:' || u.protocol === 'https:') return v;
  } catch {}
  throw new RankwatchError('RANKWATCH_ERR_USAGE', `--${flag} needs an http(s) URL, got "${v}"`);
}

const SEVERITIES = new Set(['info', 'warning', 'critical']);

/** `--alert-routes`: a JSON list of {types?, severities?, sinks}; every problem named in one line. */
export function parseRoutes(text: string, sinks: string[]): AlertRoute[] {
  const bad = (why: string) => new RankwatchError('RANKWATCH_ERR_USAGE', `--alert-routes: ${why}`);
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch {
    throw bad('not JSON');
  }
  if (!Array.isArray(v)) throw bad('a JSON list of routes');
  const strings = (x: unknown) => Array.isArray(x) && x.every((s) => typeof s === 'string');
  return v.map((r, i) => {
    if (typeof r !== 'object' || r === null) throw bad(`route ${i + 1} is not an object`);
    const { types, severities, sinks: to, ...rest } = r as Record<string, unknown>;
    if (Object.keys(rest).length) throw bad(`route ${i + 1}: unknown key ${Object.keys(rest)[0]}`);
    if (!strings(to)) throw bad(`route ${i + 1}: "sinks" must be a list of names`);
    const unknown = (to as string[]).filter((s) => !sinks.includes(s));
    if (unknown.length)
      throw bad(`route ${i + 1}: no sink named ${unknown.join(', ')} (have ${sinks.join(', ') || 'none'})`);
    if (types !== undefined && !strings(types))
      throw bad(`route ${i + 1}: "types" must be a list of finding types`);
    if (
      severities !== undefined &&
      !(strings(severities) && (severities as string[]).every((s) => SEVERITIES.has(s)))
    )
      throw bad(`route ${i + 1}: "severities" takes info, warning, critical`);
    return { types, severities, sinks: to } as AlertRoute;
  });
}

/** Alerting as the flags (then the environment) ask, started; undefined when nothing asks. */
export function alertingFrom(
  values: Record<string, unknown>,
  env: NodeJS.ProcessEnv = process.env,
  onDeadLetter?: (d: DeadLetter) => void,
): Alerting | undefined {
  const am = (values['alertmanager-url'] as string | undefined) ?? env.RANKWATCH_ALERTMANAGER_URL;
  // One string, comma-separated, from the flag as from the environment.
  const hookList = (values['alert-webhook'] as string | undefined) ?? env.RANKWATCH_ALERT_WEBHOOK;
  const hooks = hookList ? hookList.split(',').filter((h) => h.trim() !== '') : [];
  if (!am && hooks.length === 0) return undefined;
  const secret = (values['alert-webhook-secret'] as string | undefined) ?? env.RANKWATCH_ALERT_WEBHOOK_SECRET;
  const linkBase = (values['alert-link-base'] as string | undefined) ?? env.RANKWATCH_ALERT_LINK_BASE;
  const sinks = [...(am ? ['alertmanager'] : []), ...hooks.map((_, i) => `webhook-${i + 1}`)];
  const routesText = (values['alert-routes'] as string | undefined) ?? env.RANKWATCH_ALERT_ROUTES;
  const routes = routesText === undefined ? undefined : parseRoutes(routesText, sinks);
  const a = new Alerting(
    {
      alertmanager: am ? { url: url(am, 'alertmanager-url'), linkBase } : undefined,
      webhooks: hooks.map((h, i) => ({
        name: `webhook-${i + 1}`,
        url: url(h.trim(), 'alert-webhook'),
        secret,
      })),
      routes,
    },
    onDeadLetter,
  );
  a.start();
  return a;
}
