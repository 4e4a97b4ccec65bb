/**
 * How long the CLI takes to start, as people run it: `node bin/rankwatch.js`, the `rankwatch` that
 * `npm link` puts on the PATH (linked here into a temporary prefix, not the machine's), and
 * `npx rankwatch`, which the README used to show and which spends its time in npm's own lookup.
 * Each is a fresh process timed from spawn to exit (best of 10 after a warm-up; npx best of 3);
 * baseline: `node -e 0`, so the ratios are what rankwatch adds to Node's own start.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadNote, type Measurement, measure, type Section } from './harness.js';

/** bench/ under tsx, dist/bench/ when built: the repository root holds package.json. */
const root = join(
  import.meta.dirname,
  existsSync(join(import.meta.dirname, '..', 'package.json')) ? '..' : '../..',
);

function started(name: string, cmd: string, args: string[], runs = 10, env = process.env): Measurement {
  const m = measure(
    name,
    1,
    'starts',
    () => {
      const r = spawnSync(cmd, args, { cwd: root, env, stdio: ['ignore', 'ignore', 'pipe'] });
      if (r.status !== 0) throw new Error(`${name}: exit ${r.status}: ${r.stderr}`);
    },
    runs,
  );
  return { ...m, name: `${name}: ${m.bestMs.toFixed(0)} ms` };
}

export async function startupBench(): Promise<Section> {
  const notes = [loadNote()];
  const node = process.execPath;
  const cli = join(root, 'bin', 'rankwatch.js');
  const baseline = started('node -e 0', node, ['-e', '0']);
  const rows = [
    started('node bin/rankwatch.js --help', node, [cli, '--help']),
    started('node bin/rankwatch.js replay --help', node, [cli, 'replay', '--help']),
    started('node bin/rankwatch.js jobs --help', node, [cli, 'jobs', '--help']),
    started('node bin/rankwatch.js up --help', node, [cli, 'up', '--help']),
    started('node bin/rankwatch.js detect --help', node, [cli, 'detect', '--help']),
  ];
  const prefix = mkdtempSync(join(tmpdir(), 'rankwatch-bench-link-'));
  const env = { ...process.env, npm_config_prefix: prefix };
  try {
    // The link `npm link` makes, in a prefix of its own; scripts off: dist/ is built already.
    execFileSync('npm', ['link', '--ignore-scripts', '--no-audit', '--no-fund'], {
      cwd: root,
      env,
      stdio: 'ignore',
    });
    rows.push(started('rankwatch --help, after npm link', join(prefix, 'bin', 'rankwatch'), ['--help']));
  } finally {
    rmSync(prefix, { recursive: true, force: true });
  }
  rows.push(started('npx rankwatch --help', 'npx', ['rankwatch', '--help'], 3));
  return {
    title: 'CLI startup',
    what: 'Time from spawn to exit of a fresh process, shown as starts per second, best of 10 after a warm-up (npx: best of 3); baseline: `node -e 0` on the same machine in the same run. `--help` of a command loads its flags and usage only: what it runs (fastify, the ClickHouse engine, kafkajs, the detectors) loads past `--help` (tests/cli-help.int.test.ts fails a command whose help resolves one of the first three).',
    baseline,
    rows,
    notes,
  };
}
