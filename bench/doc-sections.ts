/**
 * docs/benchmarks.md's generated parts: each bench's text sits between `<!-- bench:NAME -->` and
 * `<!-- bench:NAME:end -->`, and a rerun replaces only that. Whatever is outside the markers (the
 * header, paragraphs written by hand after a section's table) is kept as it is.
 */

const MARKER = /^<!-- bench:([\w-]+)(:end)? -->$/gm;

const startMarker = (name: string) => `<!-- bench:${name} -->`;
const endMarker = (name: string) => `<!-- bench:${name}:end -->`;

/** Each section's start marker (`at`) and its generated text: from `from` up to its end marker. */
type Spans = Map<string, { at: number; from: number; to: number }>;

/**
 * The sections of the doc and where their text is, or an error naming the marker at fault: one
 * missing its end (a doc written before end markers: add one after the generated text), an end
 * without its start, a section twice or inside another.
 */
export function docSections(doc: string): Spans {
  const spans: Spans = new Map();
  let open: { name: string; at: number; from: number } | undefined;
  for (const m of doc.matchAll(MARKER)) {
    const [marker, name, end] = m;
    const at = m.index;
    if (!end) {
      if (open) throw new Error(`${startMarker(open.name)} has no ${endMarker(open.name)} before ${marker}`);
      if (spans.has(name)) throw new Error(`${marker} is there twice`);
      open = { name, at, from: at + marker.length };
    } else if (open?.name !== name) throw new Error(`${marker} has no ${startMarker(name)} before it`);
    else {
      spans.set(name, { at: open.at, from: open.from, to: at });
      open = undefined;
    }
  }
  if (open) throw new Error(`${startMarker(open.name)} has no ${endMarker(open.name)} after it`);
  return spans;
}

/**
 * The doc with each section of `fresh` put between its markers. A section the doc lacks goes
 * before the next one in `order` the doc has (after the hand-written text that closes the one
 * before), or at the end; an empty doc starts with `header`.
 */
export function updateDoc(doc: string, fresh: Map<string, string>, order: string[], header: string): string {
  let out = doc.trim() === '' ? `${header.trimEnd()}\n` : doc;
  for (const name of order) {
    const text = fresh.get(name);
    if (text === undefined) continue;
    const spans = docSections(out);
    const span = spans.get(name);
    if (span) {
      out = `${out.slice(0, span.from)}\n${text.trim()}\n${out.slice(span.to)}`;
      continue;
    }
    const block = `${startMarker(name)}\n${text.trim()}\n${endMarker(name)}\n`;
    const after = order.slice(order.indexOf(name) + 1).find((n) => spans.has(n));
    if (after === undefined) out = `${out.trimEnd()}\n\n${block}`;
    else {
      const { at } = spans.get(after)!;
      out = `${out.slice(0, at)}${block}\n${out.slice(at)}`;
    }
  }
  return out;
}
