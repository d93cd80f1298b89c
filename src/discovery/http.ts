import type { Readable } from 'node:stream';

/** Reads at most `maxBytes` of a body as text (an error answer's Status), then lets go of it. */
export async function readBounded(
  body: Readable & AsyncIterable<Uint8Array>,
  maxBytes = 64 * 1024,
): Promise<string> {
  const chunks: Buffer[] = [];
  let size = 0;
  try {
    for await (const chunk of body) {
      const buf = Buffer.from(chunk);
      chunks.push(buf.subarray(0, Math.max(0, maxBytes - size)));
      size += buf.length;
      if (size >= maxBytes) break;
    }
  } catch {
    // a body cut off while reading an error message: what arrived is enough
  } finally {
    body.destroy();
  }
  return Buffer.concat(chunks).toString('utf8');
}

/** The message of a Kubernetes `Status` object, or the text itself when it is not one. */
export function statusMessage(text: string): string {
  try {
    const parsed: unknown = JSON.parse(text);
    if (typeof parsed === 'object' && parsed !== null && 'message' in parsed) {
      const message = (parsed as { message: unknown }).message;
      if (typeof message === 'string') return message;
    }
  } catch {
    // not JSON
  }
  return text.slice(0, 500);
}

/** An AbortController that also aborts when `parent` does; `dispose` detaches it from `parent`. */
export function linkedAbort(parent: AbortSignal): { controller: AbortController; dispose(): void } {
  const controller = new AbortController();
  const onAbort = () => controller.abort(parent.reason);
  if (parent.aborted) controller.abort(parent.reason);
  else parent.addEventListener('abort', onAbort, { once: true });
  return { controller, dispose: () => parent.removeEventListener('abort', onAbort) };
}

export function errorMessage(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
