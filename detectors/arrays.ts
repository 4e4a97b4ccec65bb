/** Per-rank state lives in typed arrays (no per-rank objects to collect); this grows one, keeping its contents. */
type Typed = Float64Array | Float32Array | Int32Array | Int16Array | Uint16Array | Uint8Array;

export function grown<T extends Typed>(a: T, capacity: number, fill = 0): T {
  const b = new (a.constructor as new (n: number) => T)(capacity);
  if (fill !== 0) b.fill(fill);
  b.set(a);
  return b;
}
