/** The list of rankwatch's commands (cli/main.ts runs them; tests walk their options). */
import type { Command } from './args.js';

/**
 * One line per command; its module loads only when it runs, so `rankwatch mfu` does not pay for
 * the ClickHouse engine, Kafka client and HTTP server the other commands bring in.
 */
export const COMMANDS: { name: string; summary: string; load: () => Promise<Command> }[] = [
  {
    name: 'demo',
    summary: 'run a simulated 256-rank job with two faults through the embedded pipeline',
    load: async () => (await import('./commands/demo.js')).demo,
  },
  {
    name: 'replay',
    summary: 'run the detectors over recorded events, as fast as the CPU allows',
    load: async () => (await import('./commands/replay.js')).replay,
  },
  {
    name: 'sim',
    summary: 'write the events of a simulated training job as JSON lines',
    load: async () => (await import('./commands/sim.js')).sim,
  },
  {
    name: 'mfu',
    summary: 'compute model FLOPs utilisation from a model config and a step time',
    load: async () => (await import('./commands/mfu.js')).mfu,
  },
  {
    name: 'eval',
    summary: 'score the detectors on a matrix of simulated jobs: recall, time to detect, false alarms',
    load: async () => (await import('./commands/eval.js')).evaluate,
  },
  {
    name: 'up',
    summary: 'run the embedded pipeline with an HTTP ingest endpoint (single machine)',
    load: async () => (await import('./commands/up.js')).up,
  },
  {
    name: 'detect',
    summary: 'run the detectors as a member of a Kafka consumer group',
    load: async () => (await import('./commands/detect.js')).detect,
  },
  {
    name: 'collect',
    summary: 'run the node collector: dcgm-exporter, nvidia-smi, kernel XIDs, training logs → the bus',
    load: async () => (await import('./commands/collect.js')).collect,
  },
  {
    name: 'serve',
    summary: 'serve the read API (jobs, findings, nodes) over a ClickHouse server or a chDB folder',
    load: async () => (await import('./commands/serve.js')).serve,
  },
  {
    name: 'jobs',
    summary: 'list jobs: status, size, MFU, open findings',
    load: async () => (await import('./commands/jobs.js')).jobs,
  },
  {
    name: 'report',
    summary: "one job's report: MFU, tokens/s, step time, findings by cost, hosts",
    load: async () => (await import('./commands/report.js')).report,
  },
  {
    name: 'findings',
    summary: 'list findings, newest first (--job, --open)',
    load: async () => (await import('./commands/findings.js')).findings,
  },
  {
    name: 'checkpoint',
    summary: 'checkpoint-interval advice (Young, Daly) from a save time and MTBF, or from a recorded job',
    load: async () => (await import('./commands/checkpoint.js')).checkpoint,
  },
  {
    name: 'failures',
    summary: 'recorded failure rates per cause/host/GPU model with 95% intervals, and MTBF for N GPUs',
    load: async () => (await import('./commands/failures.js')).failures,
  },
];
