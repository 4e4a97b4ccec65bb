/**
 * The alerting options `up` and `detect` share, each with its environment twin. With none set, no
 * alerting runs.
 */
import { defineOptions, type OptionValues, optionName } from '../cli/args.js';
import { RankwatchError } from '../core/errors.js';
import type { DeadLetter } from '../store/rows.js';
import { Alerting, type AlertRoute } from './alerting.js';

export const ALERT_OPTIONS = defineOptions({
  'alertmanager-url': {
    kind: 'url',
    env: 'RANKWATCH_ALERTMANAGER_URL',
    help: "send open findings (warning, critical) to Alertmanager's v2 API",
  },
  'alert-webhook': {
    kind: 'list',
    item: 'url',
    arg: 'URL[,URL]',
    env: 'RANKWATCH_ALERT_WEBHOOK',
    help: 'also POST each finding event as signed JSON to each of these URLs (comma-separated: webhook-1, webhook-2, …)',
  },
  'alert-webhook-secret': {
    kind: 'string',
    arg: 'S',
    env: 'RANKWATCH_ALERT_WEBHOOK_SECRET',
    help: 'HMAC-SHA256 secret for x-rankwatch-signature',
  },
  'alert-link-base': {
    kind: 'url',
    env: 'RANKWATCH_ALERT_LINK_BASE',
    help: 'base of the finding link in alerts (e.g. http://rankwatch:7070)',
  },
  'alert-routes': {
    kind: 'string',
    arg: 'JSON',
    env: 'RANKWATCH_ALERT_ROUTES',
    example: '[{"severities":["critical"],"sinks":[]}]',
    defaultText: 'warning and critical to every sink',
    help: 'routes, first match wins, e.g. \'[{"severities":["critical"],"sinks":["alertmanager","webhook-1"]},{"types":["throttle"],"sinks":["webhook-1"]}]\'',
  },
});

export type AlertValues = OptionValues<typeof ALERT_OPTIONS>;

const SEVERITIES = new Set(['info', 'warning', 'critical']);

/** `--alert-routes`: a JSON list of {types?, severities?, sinks}; every problem named in one line. */
export function parseRoutes(text: string, sinks: string[]): AlertRoute[] {
  const name = optionName('alert-routes', ALERT_OPTIONS['alert-routes']);
  const bad = (why: string) => new RankwatchError('RANKWATCH_ERR_USAGE', `${name}: ${why}`);
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

/** Alerting as the options ask, started; undefined when nothing asks. */
export function alertingFrom(v: AlertValues, onDeadLetter?: (d: DeadLetter) => void): Alerting | undefined {
  const am = v['alertmanager-url'];
  const hooks = v['alert-webhook'];
  if (!am && hooks.length === 0) return undefined;
  const secret = v['alert-webhook-secret'];
  const sinks = [...(am ? ['alertmanager'] : []), ...hooks.map((_, i) => `webhook-${i + 1}`)];
  const routesText = v['alert-routes'];
  const routes = routesText === undefined ? undefined : parseRoutes(routesText, sinks);
  const a = new Alerting(
    {
      alertmanager: am ? { url: am, linkBase: v['alert-link-base'] } : undefined,
      webhooks: hooks.map((url, i) => ({ name: `webhook-${i + 1}`, url, secret })),
      routes,
    },
    onDeadLetter,
  );
  a.start();
  return a;
}
