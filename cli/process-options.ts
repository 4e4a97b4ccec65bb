/**
 * Settings of the process, whatever the command: environment only, read once by cli/main.ts before
 * the command runs (a bad value stops it there, in one line).
 */
import { HEAP_GROWING_PERCENT } from '../core/heap.js';
import { defineOptions } from './args.js';

export const HEAP_OPTIONS = defineOptions({
  'heap-growing-percent': {
    kind: 'number',
    integer: true,
    env: 'RANKWATCH_HEAP_GROWING_PERCENT',
    envOnly: true,
    default: HEAP_GROWING_PERCENT,
    help: "how far the heap may grow past its live size between full collections, in percent (0: V8's own policy; docs/operations.md, memory per rank)",
  },
});

export const PROCESS_OPTIONS = defineOptions({
  'log-level': {
    kind: 'enum',
    values: ['trace', 'debug', 'info', 'warn', 'error', 'fatal', 'silent'],
    env: 'RANKWATCH_LOG_LEVEL',
    envOnly: true,
    default: 'info',
    help: 'the lowest level logged on stderr',
  },
  'log-format': {
    kind: 'enum',
    values: ['text', 'json'],
    env: 'RANKWATCH_LOG_FORMAT',
    envOnly: true,
    default: 'text',
    help: 'log lines for people, or JSON lines (pino) for a log shipper',
  },
  debug: {
    kind: 'boolean',
    env: 'RANKWATCH_DEBUG',
    envOnly: true,
    help: 'an error that stops a command also prints its stack trace',
  },
  ...HEAP_OPTIONS,
});
