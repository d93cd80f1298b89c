/** A watch stream line longer than this is an error rather than a reason to buffer without end. */
export const MAX_LINE_CHARS = 8 * 1024 * 1024;

export class LineTooLongError extends Error {
  constructor(limit: number) {
    super(`watch stream line longer than ${limit} characters`);
    this.name = 'LineTooLongError';
  }
}

/**
 * Splits a byte stream into its newline-terminated lines (blank lines skipped). A last line
 * without its newline is yielded too: a truncated event then fails to parse, which the caller
 * treats like any broken stream.
 */
export async function* ndjsonLines(
  body: AsyncIterable<Uint8Array>,
  maxLineChars: number = MAX_LINE_CHARS,
): AsyncGenerator<string, void, undefined> {
  const decoder = new TextDecoder();
  let pending = '';
  for await (const chunk of body) {
    pending += decoder.decode(chunk, { stream: true });
    let newline = pending.indexOf('\n');
    while (newline !== -1) {
      const line = pending.slice(0, newline).trim();
      pending = pending.slice(newline + 1);
      if (line.length > 0) yield line;
      newline = pending.indexOf('\n');
    }
    if (pending.length > maxLineChars) throw new LineTooLongError(maxLineChars);
  }
  pending += decoder.decode();
  const last = pending.trim();
  if (last.length > 0) yield last;
}
