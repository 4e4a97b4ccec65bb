import { type Command, defineOptions, optionsHelp, parseOptions } from '../args.js';
import { SOURCE_OPTIONS, SOURCE_OPTIONS_HELP, withSource } from '../read-source.js';
import { table } from '../table.js';
import { ackText, cost, type Incident, place } from './report.js';

const FINDINGS_OPTIONS = defineOptions({
  job: { kind: 'string', arg: 'J', help: "only this job's" },
  open: { kind: 'boolean', help: 'only those not resolved' },
  host: { kind: 'string', arg: 'H', help: "only this host's" },
  type: { kind: 'string', arg: 'T', help: 'straggler, throttle, slow_link, xid, ecc, ...' },
  limit: { kind: 'number', integer: true, min: 1, default: 100, help: 'at most N' },
});

const OPTIONS = defineOptions({ ...FINDINGS_OPTIONS, ...SOURCE_OPTIONS });

export const findings: Command = {
  name: 'findings',
  usage: `rankwatch findings [--job J] [--open] [options]

Lists incidents in their latest state, newest first, with who acked or silenced each (a
resolved one keeps the summary and cost it had while open).

${optionsHelp(FINDINGS_OPTIONS)}
${SOURCE_OPTIONS_HELP}`,
  options: OPTIONS,
  async run(argv) {
    const { values } = parseOptions(argv, OPTIONS);
    if (values.help) {
      console.log(this.usage);
      return 0;
    }
    const limit = values.limit;
    const q = new URLSearchParams();
    if (values.job) q.set('job', values.job);
    if (values.host) q.set('host', values.host);
    if (values.type) q.set('type', values.type);
    if (values.open) q.set('status', 'open');
    const all = await withSource(values, async (s) => {
      const out: Incident[] = [];
      let cursor: string | null = null;
      do {
        const page = new URLSearchParams(q);
        page.set('limit', String(Math.min(1000, limit - out.length)));
        if (cursor) page.set('cursor', cursor);
        const r = await s.get<{ findings: Incident[]; next_cursor: string | null }>(`/v1/findings?${page}`);
        out.push(...r.findings);
        cursor = r.next_cursor;
      } while (cursor && out.length < limit);
      return out;
    });
    if (values.json) {
      console.log(JSON.stringify(all, null, 2));
      return 0;
    }
    if (all.length === 0) {
      console.log('No findings match.');
      return 0;
    }
    console.log(
      table(
        ['last change', 'type', 'state', 'severity', 'job', 'where', 'cost', 'action', 'summary'],
        all.map((f) => [
          new Date(f.ts).toISOString().slice(0, 19).replace('T', ' '),
          f.type,
          // Who acked or silenced it goes with its state: one column less to fit a terminal.
          ackText(f) === '-' ? f.state : `${f.state}, ${ackText(f)}`,
          f.severity,
          f.job ?? '-',
          place(f),
          cost(f),
          f.action,
          f.summary,
        ]),
      ),
    );
    return 0;
  },
};
