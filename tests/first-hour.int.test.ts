/**
 * The first hour of a new user, as they would try it with the built binary: the demo at other
 * sizes and twice into one folder, wrong flags and paths, a port and a data folder already in use,
 * gzip input, old events, and `up` started through npm whose parent dies. Every failure must be
 * one line with the flag or path it is about, exit 2 when what was typed is wrong.
 */
import { execFile, spawn } from 'node:child_process';
import {
  chmodSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { gzipSync } from 'node:zlib';
import { afterAll, describe, expect, it } from 'vitest';

const run = promisify(execFile);
const root = join(import.meta.dirname, '..');
const bin = join(root, 'bin', 'rankwatch.js');
const dir = mkdtempSync(join(tmpdir(), 'rankwatch-first-hour-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

async function rankwatch(args: string[], env: NodeJS.ProcessEnv = process.env) {
  try {
    const r = await run(process.execPath, [bin, ...args], { maxBuffer: 64 << 20, env });
    return { code: 0, stdout: r.stdout, stderr: r.stderr };
  } catch (err) {
    const e = err as { code: number; stdout: string; stderr: string };
    return { code: e.code, stdout: e.stdout, stderr: e.stderr };
  }
}

/** The one-line shape every failure has: no stack trace, the command named, the code. */
function expectOneLine(stderr: string, cmd: string, what: RegExp) {
  const lines = stderr.split('\n').filter((l) => l.trim() !== '' && !l.startsWith('Code: 76. DB::Exception'));
  expect(lines, stderr).toHaveLength(1);
  expect(lines[0]).toMatch(new RegExp(`^rankwatch ${cmd}: RANKWATCH_ERR_[A-Z_]+: `));
  expect(lines[0]).toMatch(what);
  expect(stderr).not.toMatch(/\n\s+at /);
}

/** A chDB folder holding a simulated job, made as a user makes one: sim, then replay --data. */
async function storedJob(data: string, ...simArgs: string[]) {
  const events = `${data}.jsonl`;
  expect((await rankwatch(['sim', ...simArgs, '-o', events])).code).toBe(0);
  const r = await rankwatch(['replay', events, '--quiet', '--data', data, '--findings', `${data}.findings`]);
  expect(r.code, r.stderr).toBe(0);
}

describe('demo at any size, run after run', () => {
  it('runs --ranks 64 with its default faults placed inside the job, and a second run reports only itself', async () => {
    const data = join(dir, 'demo-data');
    const args = ['demo', '--ranks', '64', '--steps', '60', '--speed', '0', '--data', data];
    const first = await rankwatch(args);
    expect(first.code, first.stderr).toBe(0);
    expect(first.stdout).toMatch(/injecting throttle:rank=9,at=15,until=37, nic:rank=50,at=25,factor=3/);
    const second = await rankwatch(args);
    expect(second.code, second.stderr).toBe(0);
    const job = (s: string) => /rankwatch demo: job (\S+),/.exec(s)?.[1];
    expect(job(first.stdout)).toMatch(/^demo-\d{8}-\d{6}$/);
    // A run a second later is a new job even in the same second: wait for the id to differ.
    expect(job(second.stdout)).not.toBe(job(first.stdout));
    const stored = (s: string) => /stored: (.*)/.exec(s)?.[1];
    // Same job size, same rows: the second summary did not add the first run's rows to its own.
    expect(stored(second.stdout)).toBe(stored(first.stdout));
    expect(stored(first.stdout)).toMatch(/steps 3,840/);
  });
});

describe('usage errors are one line naming the flag, exit 2', () => {
  it.each([
    [['sim', '--ranks', '0'], /--ranks needs a number of at least 1/],
    [['sim', '--ranks', '-8'], /--ranks got "-8".*--ranks/],
    [['sim', '--ranks=-8'], /--ranks needs a number of at least 1, got "-8"/],
    [['sim', '--ranks', '12'], /--ranks needs 1 to 8 or a multiple of 8/],
    [['sim', '--steps', '1.5'], /--steps needs a whole number/],
    [
      ['sim', '--ranks', '64', '--fault', 'throttle:rank=64'],
      /--fault throttle:rank=64.*rank 64 is not in the job \(ranks 0 to 63\)/,
    ],
    [['sim', '--steps', '50', '--fault', 'nic:rank=3,at=50'], /at=50 is past the last step \(49\)/],
    [['sim', '--fault', 'link:rank=3,peer=999'], /rank 999 is not in the job/],
    [['demo', '--ranks', '16', '--fault', 'throttle:rank=37'], /rank 37 is not in the job \(ranks 0 to 15\)/],
    [['up', '--port', '70000'], /--port needs a number of at most 65535/],
    [['up', '--port', 'http'], /--port needs a number, got "http"/],
    [['collect', '--health-port', '-1'], /--health-port/],
    [['mfu', '--gpus', '-4'], /--gpus/],
    // A budget left out is a flag left out (it used to exit 1).
    [
      [
        'up',
        '--port',
        '0',
        '--data',
        join(dir, 'budget-data'),
        '--cordon-driver',
        'slurm',
        '--cordon-enable',
      ],
      /enabled without a budget: set maxShare \(--cordon-max-share\), maxNodes \(--cordon-max-nodes\), perHour \(--cordon-per-hour\)/,
    ],
    [['report'], /give one job id/],
    [['replay', join(dir, 'no-such.jsonl')], /no such file or folder: .*no-such\.jsonl, the input FILE/],
    [
      ['mfu', '--gpu-model', 'H1OO', '--model', join(dir, 'none.json')],
      /--model .*none\.json: cannot read it/,
    ],
  ])('%j', async (args, what) => {
    const r = await rankwatch(args);
    expect(r.code, r.stderr).toBe(2);
    expectOneLine(r.stderr, args[0], what);
  });
});

describe('paths and ports', () => {
  it('a folder where a file is expected names the flag, before any output', async () => {
    const out = await rankwatch(['sim', '--ranks', '8', '--steps', '2', '-o', dir]);
    expect(out.code).toBe(2);
    expectOneLine(out.stderr, 'sim', new RegExp(`a folder where a file is expected: ${dir}, -o`));
    const truth = await rankwatch(['sim', '--ranks', '8', '--steps', '2', '--truth', dir]);
    expect(truth.code).toBe(2);
    expect(truth.stdout).toBe('');
    expectOneLine(truth.stderr, 'sim', /--truth/);
    const input = await rankwatch(['replay', dir]);
    expect(input.code).toBe(2);
    expectOneLine(input.stderr, 'replay', /a folder where a file is expected: .*the input FILE/);
  });

  it('a file where the data folder is expected names --data', async () => {
    const file = join(dir, 'not-a-folder');
    writeFileSync(file, 'x');
    const r = await rankwatch(['up', '--port', '0', '--data', file]);
    expect(r.code).toBe(2);
    expectOneLine(r.stderr, 'up', /a file where a folder is expected: .*not-a-folder, --data/);
  });

  it('a port in use is one line naming the port, exit 1', async () => {
    const server = createServer();
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const port = (server.address() as { port: number }).port;
    try {
      const r = await rankwatch(['up', '--port', String(port), '--data', join(dir, 'port-data')]);
      expect(r.code).toBe(1);
      expectOneLine(
        r.stderr,
        'up',
        new RegExp(`RANKWATCH_ERR_PORT_IN_USE: 127\\.0\\.0\\.1:${port} is in use, --port`),
      );
    } finally {
      server.close();
    }
  });

  it('a data folder another rankwatch holds is one line naming --data, exit 1', async () => {
    const data = join(dir, 'held');
    const holder = spawn(process.execPath, [bin, 'up', '--port', '0', '--data', data], { stdio: 'pipe' });
    try {
      await new Promise<void>((resolve, reject) => {
        holder.stdout.on('data', (b: Buffer) => b.toString().includes('listening on') && resolve());
        holder.once('exit', (c) => reject(new Error(`holder exited ${c}`)));
      });
      const r = await rankwatch(['up', '--port', '0', '--data', data]);
      expect(r.code).toBe(1);
      expectOneLine(r.stderr, 'up', new RegExp(`RANKWATCH_ERR_DATA_IN_USE: .*${data}, --data`));
    } finally {
      holder.kill('SIGTERM');
      await new Promise((r) => holder.once('exit', r));
    }
  });
});

describe('the data folder', () => {
  it.each([
    ['jobs'],
    ['findings', '--open'],
    ['report', 'some-job'],
    ['failures'],
    ['checkpoint', '--job', 'some-job'],
    ['serve', '--port', '0'],
  ])('%s on a mistyped --data refuses it, exit 2, and creates nothing', async (...args) => {
    const typo = join(dir, 'dtaa');
    const r = await rankwatch([...args, '--data', typo]);
    expect(r.code, r.stdout).toBe(2);
    expectOneLine(
      r.stderr,
      args[0],
      new RegExp(`no chDB data folder at ${typo} \\(no such folder\\), --data`),
    );
    expect(r.stdout).toBe('');
    expect(existsSync(typo)).toBe(false);
  });

  it('a folder that is no chDB store (say, the working folder) is refused too, and left as it was', async () => {
    const plain = join(dir, 'plain-folder');
    mkdirSync(plain);
    const r = await rankwatch(['jobs', '--data', plain]);
    expect(r.code).toBe(2);
    expectOneLine(
      r.stderr,
      'jobs',
      /no chDB data folder at .*plain-folder \(it holds no rankwatch data\), --data/,
    );
    expect(readdirSync(plain)).toEqual([]);
  });

  // Root writes anywhere: as root the command runs as nobody (setpriv), over a folder root owns.
  const root = process.getuid?.() === 0;
  const nobody = root ? ['setpriv', '--reuid=65534', '--regid=65534', '--clear-groups'] : [];
  it.skipIf(root && !existsSync('/usr/bin/setpriv'))(
    'a folder this user cannot write is said to be unwritable (path and errno), not held by another process: exit 1',
    async () => {
      const open = mkdtempSync(join(tmpdir(), 'rankwatch-unwritable-'));
      chmodSync(open, 0o755); // nobody may enter, not write
      const data = join(open, 'data');
      try {
        // A store written by another user (here: root, or this user before the chmod).
        await storedJob(data, '--ranks', '8', '--steps', '3');
        if (!root) chmodSync(data, 0o555);
        for (const args of [
          ['up', '--port', '0', '--data', data],
          ['jobs', '--data', data],
        ]) {
          const [cmd, ...rest] = nobody.length
            ? [nobody[0], ...nobody.slice(1), process.execPath, bin, ...args]
            : [process.execPath, bin, ...args];
          const r = await run(cmd, rest).then(
            (o) => ({ code: 0, stderr: o.stderr }),
            (e: { code: number; stderr: string }) => ({ code: e.code, stderr: e.stderr }),
          );
          expect(r.code, r.stderr).toBe(1);
          expectOneLine(
            r.stderr,
            args[0],
            new RegExp(
              `RANKWATCH_ERR_PATH: not writable by this user, permission denied \\(EACCES\\): ${data}, --data`,
            ),
          );
          expect(r.stderr).not.toMatch(/another process/);
        }
      } finally {
        rmSync(open, { recursive: true, force: true });
      }
    },
  );
});

// A terminal of 100 columns: util-linux's `script` runs the command on a real pseudo-terminal.
describe.skipIf(!existsSync('/usr/bin/script'))('tables on a terminal', () => {
  it('fit its width (wrapping the long columns); piped, they are as wide as their cells', async () => {
    const data = join(dir, 'tty-data');
    await storedJob(data, '--ranks', '16', '--steps', '120', '--fault', 'throttle:rank=5,at=30');
    const widest = (text: string) => Math.max(...text.split('\n').map((l) => l.replace(/\r$/, '').length));
    const piped = await rankwatch(['findings', '--data', data]);
    expect(widest(piped.stdout)).toBeGreaterThan(100);
    const cmd = `stty cols 100 rows 40; ${JSON.stringify(process.execPath)} ${JSON.stringify(bin)} findings --data ${JSON.stringify(data)}`;
    const tty = await run('script', ['-qec', cmd, '/dev/null'], { maxBuffer: 16 << 20 });
    expect(tty.stdout).toMatch(/│ throttle +│/);
    expect(widest(tty.stdout)).toBeLessThanOrEqual(100);
  });
});

describe('replay input', () => {
  const sim = join(dir, 'job.jsonl');
  const simArgs = ['sim', '--ranks', '16', '--steps', '40', '--fault', 'slow_rank:rank=3,at=5,slowdown=0.4'];

  it('reads gzip (by its magic bytes, whatever the name) with the same findings as plain text', async () => {
    expect((await rankwatch([...simArgs, '--start', '1767225600000', '-o', sim])).code).toBe(0);
    const gz = join(dir, 'job.log'); // no .gz: detected from the bytes
    writeFileSync(gz, gzipSync(readFileSync(sim)));
    const a = await rankwatch(['replay', sim, '--quiet']);
    const b = await rankwatch(['replay', gz, '--quiet']);
    expect(b.code, b.stderr).toBe(0);
    expect(a.stdout.length).toBeGreaterThan(0);
    expect(b.stdout).toBe(a.stdout);
  });

  it('a cut-off gzip file is one clear line', async () => {
    const whole = gzipSync(readFileSync(sim));
    const cut = join(dir, 'cut.jsonl.gz');
    writeFileSync(cut, whole.subarray(0, whole.length >> 1));
    const r = await rankwatch(['replay', cut, '--quiet']);
    expect(r.code).toBe(1);
    expectOneLine(r.stderr, 'replay', /gzip data is damaged or cut off/);
  });

  it('exits non-zero when no line is a valid event (empty, or all garbage)', async () => {
    const empty = join(dir, 'empty.jsonl');
    writeFileSync(empty, '');
    const garbage = join(dir, 'garbage.jsonl');
    writeFileSync(garbage, 'hello\n{"v":1,"kind":"weather","ts":1}\n');
    const e = await rankwatch(['replay', empty, '--quiet']);
    expect(e.code).toBe(1);
    expectOneLine(e.stderr, 'replay', /no valid event in .*empty\.jsonl \(it is empty\)/);
    const g = await rankwatch(['replay', garbage, '--quiet']);
    expect(g.code).toBe(1);
    expectOneLine(
      g.stderr,
      'replay',
      /no valid event in .*garbage\.jsonl \(2 malformed lines; line 1: not valid JSON/,
    );
  });

  it('says how many events were older than the raw-data retention when it stores them', async () => {
    // Events of 2026-01-01 against a 30-day retention, as `sim` dated them before it defaulted to now.
    const r = await rankwatch([
      'replay',
      sim,
      '--quiet',
      '--data',
      join(dir, 'old-data'),
      '--findings',
      join(dir, 'f.jsonl'),
    ]);
    expect(r.code, r.stderr).toBe(0);
    const lines = readFileSync(sim, 'utf8').trim().split('\n').length;
    expect(r.stderr).toMatch(
      new RegExp(`${lines} of ${lines} events are older than the raw-data retention \\(30 days`),
    );
  });

  it('sim --failures ends its days now, so a store keeps them all (--start still fixes the time)', async () => {
    const file = join(dir, 'fleet.jsonl');
    const before = Date.now();
    const sim = await rankwatch([
      'sim',
      '--failures',
      '--nodes',
      '16',
      '--days',
      '3',
      '--seed',
      '2',
      '-o',
      file,
    ]);
    expect(sim.code, sim.stderr).toBe(0);
    const ts = readFileSync(file, 'utf8')
      .trim()
      .split('\n')
      .map((l) => (JSON.parse(l) as { ts: number }).ts);
    expect(Math.min(...ts)).toBeGreaterThanOrEqual(before - 3 * 86_400_000 - 60_000);
    expect(Math.max(...ts)).toBeLessThanOrEqual(Date.now());
    const r = await rankwatch([
      'replay',
      file,
      '--data',
      join(dir, 'fleet-data'),
      '--findings',
      join(dir, 'ff.jsonl'),
    ]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).not.toMatch(/older than the raw-data retention/);
    const fixed = await rankwatch([
      'sim',
      '--failures',
      '--nodes',
      '2',
      '--days',
      '1',
      '--start',
      '2026-01-01T00:00:00Z',
    ]);
    expect((JSON.parse(fixed.stdout.split('\n')[0]) as { ts: number }).ts).toBe(Date.UTC(2026, 0, 1));
  });

  it('sim dates events now unless --start says otherwise', async () => {
    const before = Math.floor(Date.now() / 60_000) * 60_000;
    const r = await rankwatch(['sim', '--ranks', '8', '--steps', '2', '--no-telemetry', '--no-collectives']);
    const first = JSON.parse(r.stdout.split('\n')[0]) as { ts: number };
    expect(first.ts).toBeGreaterThanOrEqual(before);
    expect(first.ts).toBeLessThanOrEqual(Date.now());
  });
});

describe('help, version and the npm parent', () => {
  it('help CMD is CMD --help; -V and --version print the package version', async () => {
    const help = await rankwatch(['help', 'replay']);
    expect(help.code).toBe(0);
    expect(help.stdout).toMatch(/^rankwatch replay FILE/);
    const { version } = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { version: string };
    for (const flag of ['-V', '--version'])
      expect((await rankwatch([flag])).stdout.trim()).toBe(`rankwatch ${version}`);
  });

  it('up started through npm stops (drained) when its npm parent is killed outright', async () => {
    // The parent stands in for `npx`: it starts `up` as npm does (npm_command in the environment)
    // and is then SIGKILLed, which lets it forward nothing.
    const data = join(dir, 'orphan-data');
    mkdirSync(data);
    const log = join(dir, 'orphan.log');
    const parent = spawn(
      process.execPath,
      [
        '-e',
        `const c = require('node:child_process').spawn(process.execPath, ${JSON.stringify([bin, 'up', '--port', '0', '--data', data])}, { stdio: ['ignore', 'pipe', require('node:fs').openSync(${JSON.stringify(log)}, 'w')], env: { ...process.env, npm_command: 'exec' } });
         c.stdout.on('data', (b) => { if (String(b).includes('listening on')) console.log(c.pid); });
         setInterval(() => {}, 1000);`,
      ],
      { stdio: ['ignore', 'pipe', 'inherit'] },
    );
    const child = Number(
      await new Promise<string>((r) => parent.stdout.once('data', (b: Buffer) => r(b.toString()))),
    );
    const alive = () => {
      try {
        process.kill(child, 0);
        return true;
      } catch {
        return false;
      }
    };
    expect(alive()).toBe(true);
    parent.kill('SIGKILL');
    const deadline = Date.now() + 20_000;
    while (alive() && Date.now() < deadline) await new Promise((r) => setTimeout(r, 200));
    const orphaned = alive();
    if (orphaned) process.kill(child, 'SIGKILL');
    expect(orphaned).toBe(false);
    // It stopped the way SIGTERM stops it: said why, drained and closed the store.
    const said = readFileSync(log, 'utf8');
    expect(said).toMatch(/the npm process that started it is gone; stopping/);
    expect(said).toMatch(/SIGTERM: draining and closing/);
  });
});
