/**
 * A call's large strings (a long response's events, tens of MiB of JSON) cross to the storage
 * thread in pieces, one piece a turn of the gateway's event loop: `postMessage` copies what it
 * sends in one go (11 ms a MiB measured under load, issue 48), so a whole 64 MiB text sent at
 * once held every stream and `/health` for most of a second.
 */

/** Characters of one piece. */
export const PIECE_CHARS = 256 * 1024;

/** Where a large string stood in a call's arguments: its pieces are the `index`th list. */
export interface LargeStringRef {
  readonly __sluiceLargeString: number;
}

/** How deep in a call's arguments large strings are looked for (an ending's `insert.eventsJson` is at 2). */
const MAX_DEPTH = 3;

/**
 * The arguments with each string longer than a piece replaced by a reference, and the pieces of
 * each; undefined when there is none (the arguments are sent as they are).
 */
export function splitLargeStrings(args: unknown[]): { args: unknown[]; pieces: string[][] } | undefined {
  const pieces: string[][] = [];
  const walk = (value: unknown, depth: number): unknown => {
    if (typeof value === 'string') {
      if (value.length <= PIECE_CHARS) return value;
      const parts: string[] = [];
      for (let at = 0; at < value.length; at += PIECE_CHARS) parts.push(value.slice(at, at + PIECE_CHARS));
      pieces.push(parts);
      return { __sluiceLargeString: pieces.length - 1 } satisfies LargeStringRef;
    }
    if (depth >= MAX_DEPTH || value === null || typeof value !== 'object') return value;
    if (Array.isArray(value)) {
      let changed = false;
      const out = value.map((item) => {
        const next = walk(item, depth + 1);
        if (next !== item) changed = true;
        return next;
      });
      return changed ? out : value;
    }
    if (Object.getPrototypeOf(value) !== Object.prototype) return value;
    let out: Record<string, unknown> | undefined;
    for (const [key, item] of Object.entries(value)) {
      const next = walk(item, depth + 1);
      if (next !== item) {
        out ??= { ...(value as Record<string, unknown>) };
        out[key] = next;
      }
    }
    return out ?? value;
  };
  const out = args.map((arg) => walk(arg, 0));
  return pieces.length === 0 ? undefined : { args: out, pieces };
}

/** The arguments with each reference replaced by its string, joined from its pieces (the thread's side). */
export function joinLargeStrings(args: unknown[], pieces: readonly (readonly string[])[]): unknown[] {
  const walk = (value: unknown, depth: number): unknown => {
    if (value === null || typeof value !== 'object' || depth > MAX_DEPTH) return value;
    const ref = (value as Partial<LargeStringRef>).__sluiceLargeString;
    if (typeof ref === 'number') return (pieces[ref] ?? []).join('');
    if (Array.isArray(value)) return value.map((item) => walk(item, depth + 1));
    const out: Record<string, unknown> = {};
    for (const [key, item] of Object.entries(value)) out[key] = walk(item, depth + 1);
    return out;
  };
  return args.map((arg) => walk(arg, 0));
}
