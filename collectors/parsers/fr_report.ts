/**
 * The text report of PyTorch's Flight Recorder analyzer (`python -m
 * torch.distributed.flight_recorder.fr_trace DIR`, also `torchfrtrace`) → the problems it names.
 *
 * Each problem is a block that starts with one of these lines (spellings of torch 2.5 to 2.15)
 *   Not all ranks joining collective 5 at entry 4                   (2.5)
 *   Not all ranks joining collective: sequence number: 31117        (late 2024)
 *   Not all ranks joining collective, sequence number: 5            (2.6 on)
 *   Collective sequence number: 5 has errors
 *   Input/output mismatch in the collective sequence number: 9
 * followed by "key: value" lines: group info, collective, missing ranks, input/output sizes,
 * world size, expected ranks (a set, or in 2.5 a count), collective state, error msg ("Culprit
 * rank 1; Error type: SIZE_OR_SYNTAX_MISMATCH, Expected input sizes: …", several joined by ", "),
 * and the collective stack trace (one frame per line). Other lines (warnings, training logs
 * interleaved with the report) are skipped.
 */
import type { FrProblem } from './flight_recorder.js';
import { type ParseProblem, problem, splitLines, splitShipperStamp } from './problems.js';

const STARTS: [RegExp, 'not_joined' | 'errors' | 'numel'][] = [
  [/^Not all ranks joining collective[,:]?\s*sequence number:\s*(\d+)/, 'not_joined'],
  [/^Not all ranks joining collective (\d+) at entry \d+/, 'not_joined'],
  [/^Collective sequence number:\s*(\d+) has errors/, 'errors'],
  [/^Input\/output mismatch in the collective sequence number:\s*(\d+)/, 'numel'],
];
const FIELD =
  /^(internal record id|group info|collective|missing ranks|input sizes|output sizes|world size|expected ranks|collective state|error msg|total input numel|total output numel|collective stack trace):\s?(.*)$/;
const FRAME = /^\s*(\S.*) at (\S.*:\d+)\s*$/;
const CULPRIT = /Culprit rank (\d+); Error type: ([A-Z_]+)(?:, )?/g;

const KIND: Record<string, FrProblem['fr']> = {
  SIZE_OR_SYNTAX_MISMATCH: 'size_mismatch',
  COLLECTIVE_TYPE_MISMATCH: 'type_mismatch',
  COLLECTIVE_DTYPE_MISMATCH: 'dtype_mismatch',
  COLLECTIVE_STATE_MISMATCH: 'state_mismatch',
};

/** "{0, 1, 2}" or "[0, 1]" → numbers; undefined for anything else. */
function ranks(s: string | undefined): number[] | undefined {
  const m = s === undefined ? null : /^\s*[{[]([\d,\s]*)[}\]]\s*$/.exec(s);
  if (!m) return undefined;
  return m[1].trim() ? m[1].split(',').map((x) => Number(x.trim())) : [];
}

interface Block {
  kind: 'not_joined' | 'errors' | 'numel';
  seq: number;
  line: number;
  raw: string;
  fields: Map<string, string>;
  frames: string[];
  /** Lines of two blocks are mixed: nothing in it can be attributed. */
  mixed?: boolean;
}

function finish(b: Block, out: FrProblem[], problems: ParseProblem[]): void {
  if (b.mixed) return;
  const f = b.fields;
  const group = f.get('group info');
  // "0:default_pg" (name:desc), or just the name when the description is "undefined".
  const [pgName, ...rest] = (group ?? '').split(':');
  const expected = ranks(f.get('expected ranks'));
  const userFrame = b.frames.find((fr) => !/\/torch\/|<string>|multiprocessing\//.test(fr));
  const common: FrProblem = {
    fr: 'other',
    seq: b.seq,
    ...(group ? { pgName, ...(rest.length ? { pgDesc: rest.join(':') } : {}) } : {}),
    ...(f.get('collective') ? { opRaw: f.get('collective') } : {}),
    ...(expected ? { expectedRanks: expected } : {}),
    ...(userFrame ? { callSite: userFrame.trim() } : {}),
  };
  if (b.kind === 'not_joined') {
    const missing = ranks(f.get('missing ranks'));
    if (!missing?.length) {
      problems.push(
        problem(b.line, 'a "not all ranks joining" block without its missing ranks (cut?)', b.raw),
      );
      return;
    }
    for (const rank of missing) out.push({ ...common, fr: 'not_joined', rank, missingRanks: missing });
    return;
  }
  if (b.kind === 'numel') {
    // all_to_all: the analyzer cannot tell which rank is wrong.
    const detail = `total input numel ${f.get('total input numel') ?? '?'} vs total output numel ${f.get('total output numel') ?? '?'}`;
    out.push({ ...common, fr: 'size_mismatch', errorType: 'SIZE_OR_SYNTAX_MISMATCH', detail });
    return;
  }
  const msg = f.get('error msg');
  const culprits = msg ? [...msg.matchAll(CULPRIT)] : [];
  if (!culprits.length) {
    problems.push(problem(b.line, 'a "has errors" block without its culprit (cut?)', b.raw));
    return;
  }
  culprits.forEach((m, i) => {
    const end = i + 1 < culprits.length ? culprits[i + 1].index : msg!.length;
    const detail = msg!.slice(m.index + m[0].length, end).replace(/,\s*$/, '');
    out.push({
      ...common,
      fr: KIND[m[2]] ?? 'other',
      errorType: m[2],
      rank: Number(m[1]),
      ...(detail ? { detail } : {}),
    });
  });
}

/** Every problem the report names, and the blocks it could not use. */
export function parseFrReport(text: string): { problems: FrProblem[]; parseProblems: ParseProblem[] } {
  const out: FrProblem[] = [];
  const parseProblems: ParseProblem[] = [];
  let block: Block | undefined;
  let inTrace = false;
  splitLines(text).forEach((raw, i) => {
    const line = splitShipperStamp(raw).rest;
    const start = STARTS.find(([re]) => re.test(line));
    if (start) {
      if (block) finish(block, out, parseProblems);
      block = {
        kind: start[1],
        seq: Number(start[0].exec(line)![1]),
        line: i + 1,
        raw: line,
        fields: new Map(),
        frames: [],
      };
      inTrace = false;
      return;
    }
    if (!block) return;
    const field = FIELD.exec(line);
    if (field) {
      if (block.fields.has(field[1]) && field[1] !== 'collective stack trace') {
        // The same key twice: a second report's lines are interleaved with this one's, and no
        // field of the block can be trusted to be its own.
        if (!block.mixed)
          parseProblems.push(
            problem(i + 1, `"${field[1]}" twice in one block: interleaved reports, block skipped`, line),
          );
        block.mixed = true;
        return;
      }
      block.fields.set(field[1], field[2].trim());
      inTrace = field[1] === 'collective stack trace';
      if (inTrace && FRAME.test(field[2])) block.frames.push(field[2].trim());
      return;
    }
    if (inTrace && FRAME.test(line) && block.frames.length < 64) block.frames.push(line.trim());
  });
  if (block) finish(block, out, parseProblems);
  return { problems: out, parseProblems };
}

/** Text that reads like the analyzer's report (for sniffing a file of unknown kind). */
export function looksLikeFrReport(text: string): boolean {
  return splitLines(text.slice(0, 1 << 20)).some((l) =>
    STARTS.some(([re]) => re.test(splitShipperStamp(l).rest)),
  );
}
