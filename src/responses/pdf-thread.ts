import type { PdfJob, PdfThreadMessage } from './pdf-reader.js';

/**
 * A PDF reader: a process of its own that reads the text of one PDF with pdf.js, off the
 * gateway's event loop, then is killed by the gateway. A process, not a worker thread: V8 ends a
 * thread that passes its heap limit gracefully only when it can, and a large allocation near the
 * limit (pdf.js growing an array of a long string's characters) aborts the whole process instead,
 * which here is this reader and not the gateway. Its JS heap is bounded by `--max-old-space-size`;
 * the binary buffers pdf.js decodes streams into live outside that heap, so they are bounded here:
 * a typed array or a decompressed stream that would take this process's buffers past
 * `maxBufferBytes` tells the gateway, which kills it (the PDF is refused as too complex).
 */
const MIB = 1024 * 1024;
/** Set by the job (nothing large is allocated before it comes). */
let maxBufferBytes = Number.POSITIVE_INFINITY;
let exceeded = false;

function send(message: PdfThreadMessage): void {
  process.send?.(message);
}

/** Whether `bytes` more would take this process's buffers past the bound; says so once, at once. */
function overBound(bytes: number): boolean {
  if (!exceeded && process.memoryUsage().arrayBuffers + bytes <= maxBufferBytes) return false;
  if (!exceeded) {
    exceeded = true;
    send({ type: 'exceeded' });
  }
  return true;
}

function bufferBound(): RangeError {
  return new RangeError(`PDF buffers past ${Math.round(maxBufferBytes / MIB)} MB`);
}

/** Bytes a typed array (or ArrayBuffer) constructor is asked to allocate; views of a buffer allocate none. */
function requestedBytes(args: readonly unknown[], bytesPerElement: number): number {
  const first = args[0];
  if (typeof first === 'number') return first * bytesPerElement;
  if (typeof first === 'object' && first !== null && !(first instanceof ArrayBuffer)) {
    const length = (first as { length?: unknown }).length;
    if (typeof length === 'number') return length * bytesPerElement;
  }
  return 0;
}

type Constructor = new (...args: unknown[]) => object;

/** `name`'s global constructor, checked against the bound for each allocation of 1 MiB or more. */
function guard(name: string, bytesPerElement: number): void {
  const target = (globalThis as unknown as Record<string, Constructor>)[name];
  if (!target) return;
  (globalThis as unknown as Record<string, Constructor>)[name] = new Proxy(target, {
    construct(native, args, newTarget) {
      const bytes = requestedBytes(args, bytesPerElement);
      if (bytes >= MIB && overBound(bytes)) throw bufferBound();
      return Reflect.construct(native, args, newTarget) as object;
    },
  });
}

guard('ArrayBuffer', 1);
for (const name of ['Uint8Array', 'Uint8ClampedArray', 'Int8Array']) guard(name, 1);
for (const name of ['Uint16Array', 'Int16Array']) guard(name, 2);
for (const name of ['Uint32Array', 'Int32Array', 'Float32Array']) guard(name, 4);
guard('Float64Array', 8);

/**
 * pdf.js inflates a stream with the platform's DecompressionStream, whose chunks are allocated
 * natively: the output is counted as it comes, and the stream fails past the bound.
 */
const NativeDecompressionStream = globalThis.DecompressionStream;
class BoundedDecompressionStream {
  readonly readable: ReadableStream<Uint8Array>;
  readonly writable: DecompressionStream['writable'];
  constructor(format: ConstructorParameters<typeof DecompressionStream>[0]) {
    const inner = new NativeDecompressionStream(format);
    let sinceCheck = 0;
    this.writable = inner.writable;
    this.readable = inner.readable.pipeThrough(
      new TransformStream<Uint8Array, Uint8Array>({
        transform(chunk, controller) {
          sinceCheck += chunk.byteLength;
          if (sinceCheck >= MIB) {
            sinceCheck = 0;
            if (overBound(0)) {
              controller.error(bufferBound());
              return;
            }
          }
          controller.enqueue(chunk);
        },
      }),
    );
  }
}
globalThis.DecompressionStream = BoundedDecompressionStream as unknown as typeof DecompressionStream;

// pdf.js's own worker code runs on this thread (no worker of its own): loaded here, as pdf.js
// looks for it on `globalThis.pdfjsWorker`.
const WORKER_MODULE: string = 'pdfjs-dist/legacy/build/pdf.worker.mjs';
const [pdfjs, pdfjsWorker] = await Promise.all([
  import('pdfjs-dist/legacy/build/pdf.mjs'),
  import(WORKER_MODULE) as Promise<{ WorkerMessageHandler: unknown }>,
]);
(globalThis as { pdfjsWorker?: unknown }).pdfjsWorker = pdfjsWorker;
process.once('message', (job: PdfJob) => {
  maxBufferBytes = job.maxBufferBytes;
  void read(job).then(send, (err: unknown) => {
    // Out of memory or stack while reading is the file's complexity, not a broken file.
    if (exceeded || isExhaustion(err)) send({ type: 'exceeded' });
    else send({ type: 'unreadable', message: (err as Error)?.message ?? String(err) });
  });
});
send({ type: 'ready' });
// The gateway gone (killed outright), nobody is left to read for.
process.once('disconnect', () => process.exit(0));

/** What V8 throws when a read runs out of a resource: an allocation refused, a stack overflowed. */
function isExhaustion(err: unknown): boolean {
  if (!(err instanceof RangeError)) return false;
  return /allocation failed|invalid (?:array|string|typed array) length|maximum call stack|out of memory/i.test(
    err.message,
  );
}

/** The text of the PDF: its pages' text, one line per page, at most `maxPages` pages and `maxChars` characters. */
async function read(job: PdfJob): Promise<PdfThreadMessage> {
  const document = await pdfjs.getDocument({
    // As pdf.js wants it: a Uint8Array, not the Buffer IPC may have made of it.
    data: new Uint8Array(job.bytes.buffer, job.bytes.byteOffset, job.bytes.byteLength),
    isEvalSupported: false,
    disableFontFace: true,
    useSystemFonts: false,
    verbosity: 0,
  }).promise;
  let text = '';
  try {
    const pages = Math.min(document.numPages, job.maxPages);
    for (let n = 1; n <= pages && text.length < job.maxChars; n++) {
      const page = await document.getPage(n);
      // Read as it streams, so that one page holding more than the bound is cut, not read whole.
      const reader = page.streamTextContent().getReader();
      const parts: string[] = [];
      let length = text.length;
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        for (const item of value.items) {
          if (!('str' in item)) continue;
          parts.push(item.str);
          length += item.str.length + 1;
        }
        if (length >= job.maxChars) {
          await reader.cancel();
          break;
        }
      }
      text += `${n > 1 ? '\n' : ''}${parts.join(' ').replace(/\s+/g, ' ').trim()}`;
      page.cleanup();
    }
  } finally {
    await document.destroy();
  }
  if (exceeded) return { type: 'exceeded' };
  if (text.trim() === '') return { type: 'empty' };
  return { type: 'text', text: text.slice(0, job.maxChars) };
}
