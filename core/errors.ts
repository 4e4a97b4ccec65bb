/**
 * One catalogue of error codes. Every error that reaches a user names its code, says what
 * happened and what to do next; `retriable` tells the retry helper whether trying again can help.
 */
export const ERRORS = {
  RANKWATCH_ERR_USAGE: { retriable: false, hint: 'Run the command with --help to see its options.' },
  RANKWATCH_ERR_INPUT: { retriable: false, hint: 'Fix the input file; see the reason and line number.' },
  RANKWATCH_ERR_CONFIG: { retriable: false, hint: 'Fix the named configuration key.' },
  RANKWATCH_ERR_MODEL: {
    retriable: false,
    hint: 'Give the model fields the FLOP convention needs, or --flops-per-token.',
  },
  RANKWATCH_ERR_UNKNOWN_GPU: {
    retriable: false,
    hint: 'Pass --peak-tflops, or use a GPU model listed by `rankwatch mfu --list-gpus`.',
  },
  RANKWATCH_ERR_STORE_UNAVAILABLE: {
    retriable: true,
    hint: 'Check that the store is reachable; rankwatch retries.',
  },
  RANKWATCH_ERR_STORE_QUERY: {
    retriable: false,
    hint: 'The store rejected a statement; this is a bug, please report it.',
  },
  RANKWATCH_ERR_TRANSPORT_UNAVAILABLE: {
    retriable: true,
    hint: 'Check that the bus is reachable; rankwatch retries.',
  },
  RANKWATCH_ERR_TRANSPORT_REJECTED: {
    retriable: false,
    hint: 'The broker refused the request (topic, message size, authorization); fix the named setting.',
  },
  RANKWATCH_ERR_UNAUTHORIZED: {
    retriable: false,
    hint: 'Give the token the server was started with (--token or $RANKWATCH_TOKEN).',
  },
  RANKWATCH_ERR_STOPPED: { retriable: false, hint: 'The component was stopped; create a new one.' },
  RANKWATCH_ERR_NOT_FOUND: {
    retriable: false,
    hint: 'Check the name; `rankwatch jobs` and `rankwatch findings` list what is stored.',
  },
  RANKWATCH_ERR_API_UNAVAILABLE: {
    retriable: true,
    hint: 'Check that `rankwatch up` or `rankwatch serve` is running at --api URL.',
  },
  RANKWATCH_ERR_PORT_IN_USE: {
    retriable: false,
    hint: 'Stop what listens there, or pick another port (0 picks a free one).',
  },
  RANKWATCH_ERR_PATH: {
    retriable: false,
    hint: 'Give a path this user can write (or read), of the kind the flag names (file or folder).',
  },
  RANKWATCH_ERR_DATA_IN_USE: {
    retriable: false,
    hint: 'Another rankwatch process holds this chDB folder: stop it, or give each process its own --data.',
  },
  RANKWATCH_ERR_STORE_REFUSED: {
    retriable: false,
    hint: 'The store refused this data itself (a type or parse error); it is set aside with the reason.',
  },
  RANKWATCH_ERR_SINK_UNAVAILABLE: {
    retriable: true,
    hint: 'Check that the alert receiver (Alertmanager, webhook) is reachable; rankwatch retries.',
  },
  RANKWATCH_ERR_SINK_REJECTED: {
    retriable: false,
    hint: 'The alert receiver refused the request; check its URL, secret and logs.',
  },
  RANKWATCH_ERR_CORDON_FAILED: {
    retriable: true,
    hint: 'Check the scheduler (scontrol / Kubernetes API) is reachable and rankwatch may change nodes; rankwatch retries.',
  },
  RANKWATCH_ERR_JOURNAL_WRITE: {
    retriable: true,
    hint: 'Free space on (or repair) the disk of the spool or write-ahead log; nothing was acknowledged, so the events are kept by their sender and retried.',
  },
  RANKWATCH_ERR_CORDON_REFUSED: {
    retriable: false,
    hint: "The scheduler refused the change; check the node name and rankwatch's permissions.",
  },
  RANKWATCH_ERR_INGEST_TOO_LARGE: {
    retriable: false,
    hint: 'Nothing of the request was accepted: send it again split into smaller batches (collectors send 5,000 events a request).',
  },
  RANKWATCH_ERR_INGEST_BUSY: {
    retriable: true,
    hint: 'Nothing of the request was accepted: the server holds as many ingest bytes as it may; send it again after Retry-After seconds.',
  },
} as const;

export type ErrorCode = keyof typeof ERRORS;

export class RankwatchError extends Error {
  readonly code: ErrorCode;
  readonly retriable: boolean;
  readonly hint: string;

  constructor(code: ErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'RankwatchError';
    this.code = code;
    this.retriable = ERRORS[code].retriable;
    this.hint = ERRORS[code].hint;
  }

  /** The text a person reads: what happened, then what to do. */
  describe(): string {
    return `${this.code}: ${this.message}\n  ${this.hint}`;
  }
}

export function isRetriable(err: unknown): boolean {
  return err instanceof RankwatchError && err.retriable;
}

export interface RetryOptions {
  /** First delay; doubles each attempt up to maxDelayMs. */
  baseDelayMs?: number;
  maxDelayMs?: number;
  /** Attempts in all (Infinity: until stopped by `signal`). */
  attempts?: number;
  signal?: AbortSignal;
  /** Which errors to try again (default: those marked retriable). */
  retryIf?: (err: unknown) => boolean;
  /** Spread each delay over [delay/2, delay] so many retriers do not hit a receiver in step. */
  jitter?: boolean;
  onRetry?: (err: unknown, attempt: number, delayMs: number) => void;
}

/** Resolves true after `ms`, or false as soon as `signal` aborts. */
function wait(ms: number, signal?: AbortSignal): Promise<boolean> {
  if (signal?.aborted) return Promise.resolve(false);
  return new Promise((resolve) => {
    const onAbort = () => {
      clearTimeout(timer);
      resolve(false);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve(true);
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/** Runs `fn` until it succeeds, retrying only errors marked retriable, with capped exponential backoff. */
export async function retry<T>(fn: () => Promise<T>, opts: RetryOptions = {}): Promise<T> {
  const base = opts.baseDelayMs ?? 100;
  const max = opts.maxDelayMs ?? 5_000;
  const attempts = opts.attempts ?? 5;
  for (let attempt = 1; ; attempt++) {
    try {
      return await fn();
    } catch (err) {
      if (!(opts.retryIf ?? isRetriable)(err) || attempt >= attempts || opts.signal?.aborted) throw err;
      const full = Math.min(max, base * 2 ** (attempt - 1));
      const delay = opts.jitter ? full / 2 + Math.random() * (full / 2) : full;
      opts.onRetry?.(err, attempt, delay);
      // An abort ends the retries at once, also in the middle of a backoff wait.
      if (!(await wait(delay, opts.signal))) throw err;
    }
  }
}
