import { type Command, parseOptions } from '../args.js';
import { SOURCE_OPTIONS, SOURCE_OPTIONS_HELP, withSource } from '../read-source.js';
import { table } from '../table.js';
import { age, pct } from './report.js';

interface JobRow {
  job: string;
  status: string;
  ranks: number;
  world_size: number;
  gpu_model: string;
  last_step: number;
  last_ts: number;
  mfu_now: number | null;
  mfu_avg: number | null;
  open_findings: number;
}

export const jobs: Command = {
  name: 'jobs',
  usage: `rankwatch jobs [options]

Lists the jobs with steps in the last day, running first: status, size, MFU now and on average,
open findings. \`rankwatch report JOB\` shows one.

${SOURCE_OPTIONS_HELP}`,
  options: SOURCE_OPTIONS,
  async run(argv) {
    const { values } = parseOptions(argv, SOURCE_OPTIONS);
    if (values.help) {
      console.log(this.usage);
      return 0;
    }
    const rows = await withSource(values, (s) => s.get<{ jobs: JobRow[] }>('/v1/jobs'));
    if (values.json) {
      console.log(JSON.stringify(rows.jobs, null, 2));
      return 0;
    }
    if (rows.jobs.length === 0) {
      console.log('No jobs with steps in the last day.');
      return 0;
    }
    const now = Date.now();
    console.log(
      table(
        ['job', 'status', 'ranks', 'GPU', 'last step', 'MFU now', 'MFU avg', 'open findings', 'last seen'],
        rows.jobs.map((j) => [
          j.job,
          j.status,
          j.world_size > 0 && j.world_size !== j.ranks ? `${j.ranks}/${j.world_size}` : j.ranks,
          j.gpu_model || '-',
          j.last_step,
          pct(j.mfu_now),
          pct(j.mfu_avg),
          j.open_findings,
          age(now - j.last_ts),
        ]),
      ),
    );
    return 0;
  },
};
