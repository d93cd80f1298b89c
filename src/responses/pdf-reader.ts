import { createHash } from 'node:crypto';
import { Worker } from 'node:worker_threads';
import { LRUCache } from 'lru-cache';
import { FileParserBusy, FileTooComplex, InvalidFile, UnsupportedFileType } from '../errors/file-errors.js';
import { GatewayShuttingDown, InternalError } from '../errors/http-errors.js';
import type { Logger } from '../observability/logger.js';
import type { GatewayMetrics } from '../observability/metrics.js';

/** The bounds of reading PDFs (`files.pdf` in the configuration). */
export interface PdfReaderOptions {
  /** Longest one PDF may be read for, once its thread has started. */
  timeoutMs: number;
  /** A PDF thread's JS heap, and the binary buffers it decodes streams into, each at most this. */
  maxMemoryMb: number;
  /** PDFs read at once, each on its own thread. */
  concurrency: number;
  /** PDFs waiting for a thread; past it a request is refused (503 file_parser_busy). */
  maxQueued: number;
  /** Extracted texts kept by content hash, in MB of text. */
  cacheMb: number;
}

/** What a PDF thread is started with. */
export interface PdfThreadInit {
  maxBufferBytes: number;
}

/** The one job a PDF thread is given (its bytes are transferred). */
export interface PdfJob {
  bytes: Uint8Array;
  maxPages: number;
  maxChars: number;
}

/** What a PDF thread says: ready for its job, then how it ended. */
export type PdfThreadMessage =
  | { type: 'ready' }
  | { type: 'text'; text: string }
  | { type: 'empty' }
  | { type: 'unreadable'; message: string }
  | { type: 'exceeded' };

/** How reading one PDF ended; all but a timeout are properties of the file, kept by its hash. */
type Outcome =
  | { kind: 'text'; text: string }
  | { kind: 'empty' }
  | { kind: 'unreadable'; message: string }
  | { kind: 'too_complex'; bound: 'time' | 'memory' };

/** Pages read of one PDF, and characters kept. */
export const PDF_MAX_PAGES = 500;
export const PDF_MAX_CHARS = 2_000_000;
/** Longest a PDF thread may take to start (load pdf.js) before the read fails as a gateway fault. */
const BOOT_TIMEOUT_MS = 30_000;
const MIB = 1024 * 1024;

/**
 * Reads the text of PDFs off the event loop: each PDF on a thread of its own (pdf.js holds
 * nothing from one file when it reads the next), ended past `timeoutMs` or when its memory passes
 * `maxMemoryMb`; at most `concurrency` threads at once, `maxQueued` PDFs waiting. What a file
 * gave is kept by its SHA-256 in a bounded LRU, so that a chain of responses reading the same PDF
 * (previous_response_id) reads it once; one PDF sent by several requests at once is read once too.
 */
export class PdfReader {
  private readonly cache: LRUCache<string, Outcome>;
  private readonly reading = new Map<string, Promise<Outcome>>();
  private readonly threads = new Set<Worker>();
  private readonly waiting: { go: () => void; fail: (err: Error) => void }[] = [];
  private running = 0;
  private closed = false;

  constructor(
    private readonly options: PdfReaderOptions,
    private readonly metrics?: GatewayMetrics,
    private readonly log?: Logger,
  ) {
    this.cache = new LRUCache<string, Outcome>({
      maxSize: Math.max(1, options.cacheMb * MIB),
      // Two bytes a character, and a little for the entry itself.
      sizeCalculation: (outcome) => 64 + (outcome.kind === 'text' ? outcome.text.length * 2 : 0),
    });
  }

  /** The text of the PDF `bytes`; a PDF that cannot be read, holds no text or is too complex is a 400 naming it. */
  async text(bytes: Uint8Array, filename: string, param: string): Promise<string> {
    const hash = createHash('sha256').update(bytes).digest('hex');
    let outcome = this.cache.get(hash);
    if (outcome) this.metrics?.pdfCacheHits.inc();
    else outcome = await this.readOnce(hash, bytes);
    switch (outcome.kind) {
      case 'text':
        return outcome.text;
      case 'empty':
        throw new UnsupportedFileType(
          `The PDF '${filename}' holds no text (a scanned document?): only PDFs with a text layer are supported.`,
          param,
        );
      case 'unreadable':
        throw new InvalidFile(`The PDF '${filename}' could not be read: ${outcome.message}`, param);
      case 'too_complex':
        throw new FileTooComplex(
          filename,
          outcome.bound === 'time'
            ? `reading it takes longer than ${this.options.timeoutMs} ms`
            : `reading it takes more than ${this.options.maxMemoryMb} MB of memory`,
          param,
        );
    }
  }

  /** Reads a PDF no one is reading yet, or waits for the read under way. */
  private readOnce(hash: string, bytes: Uint8Array): Promise<Outcome> {
    const underway = this.reading.get(hash);
    if (underway) return underway;
    const read = (async () => {
      try {
        const outcome = await this.read(bytes);
        // A read cut by the clock may pass on a quieter machine: it is not kept.
        if (!(outcome.kind === 'too_complex' && outcome.bound === 'time')) this.cache.set(hash, outcome);
        return outcome;
      } finally {
        this.reading.delete(hash);
      }
    })();
    this.reading.set(hash, read);
    return read;
  }

  private async read(bytes: Uint8Array): Promise<Outcome> {
    await this.acquire();
    try {
      const outcome = await this.runThread(bytes);
      this.metrics?.pdfParses.inc({
        outcome: outcome.kind === 'too_complex' ? outcome.bound : outcome.kind,
      });
      return outcome;
    } catch (err) {
      this.metrics?.pdfParses.inc({ outcome: 'error' });
      throw err;
    } finally {
      this.release();
    }
  }

  private acquire(): Promise<void> {
    if (this.closed) return Promise.reject(new GatewayShuttingDown());
    if (this.running < this.options.concurrency) {
      this.running++;
      return Promise.resolve();
    }
    if (this.waiting.length >= this.options.maxQueued) {
      return Promise.reject(new FileParserBusy(this.options.concurrency + this.options.maxQueued));
    }
    return new Promise((go, fail) => this.waiting.push({ go, fail }));
  }

  /** A thread is free: the next PDF waiting takes it. */
  private release(): void {
    const next = this.waiting.shift();
    if (next) next.go();
    else this.running--;
  }

  /** Reads one PDF on a new thread, ended as soon as it has answered or passed a bound. */
  private runThread(bytes: Uint8Array): Promise<Outcome> {
    const { timeoutMs, maxMemoryMb } = this.options;
    return new Promise<Outcome>((resolve, reject) => {
      const thread = startThread(
        { maxBufferBytes: maxMemoryMb * MIB },
        {
          maxOldGenerationSizeMb: maxMemoryMb,
          maxYoungGenerationSizeMb: Math.min(16, Math.max(1, Math.floor(maxMemoryMb / 8))),
        },
      );
      this.threads.add(thread);
      let ready = false;
      let settled = false;
      let timer = setTimeout(() => end(new InternalError('The PDF reader did not start.')), BOOT_TIMEOUT_MS);
      const end = (result: Outcome | Error): void => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        this.threads.delete(thread);
        void thread.terminate();
        if (result instanceof Error) reject(result);
        else resolve(result);
      };
      thread.on('message', (message: PdfThreadMessage) => {
        switch (message.type) {
          case 'ready': {
            ready = true;
            clearTimeout(timer);
            const copy = new Uint8Array(bytes);
            thread.postMessage(
              { bytes: copy, maxPages: PDF_MAX_PAGES, maxChars: PDF_MAX_CHARS } satisfies PdfJob,
              [copy.buffer],
            );
            timer = setTimeout(() => end({ kind: 'too_complex', bound: 'time' }), timeoutMs);
            return;
          }
          case 'exceeded':
            return end({ kind: 'too_complex', bound: 'memory' });
          case 'text':
            return end({ kind: 'text', text: message.text });
          case 'empty':
            return end({ kind: 'empty' });
          case 'unreadable':
            return end({ kind: 'unreadable', message: message.message });
        }
      });
      thread.on('error', (err: Error & { code?: string }) => {
        if (err.code === 'ERR_WORKER_OUT_OF_MEMORY') return end({ kind: 'too_complex', bound: 'memory' });
        if (ready) return end({ kind: 'unreadable', message: err.message });
        this.log?.error({ err }, 'the PDF reader thread failed to start');
        end(new InternalError('The PDF reader failed to start.'));
      });
      thread.on('exit', () => {
        if (this.closed) return end(new GatewayShuttingDown());
        end(ready ? { kind: 'unreadable', message: 'the reader stopped' } : new InternalError());
      });
    });
  }

  /** Ends every PDF thread; PDFs waiting for one are refused. */
  async close(): Promise<void> {
    this.closed = true;
    for (const waiter of this.waiting.splice(0)) waiter.fail(new GatewayShuttingDown());
    await Promise.all([...this.threads].map((thread) => thread.terminate()));
  }
}

/**
 * The thread runs the built file, or under tsx the TypeScript source (tests, `tsx src/cli/main.ts`).
 * Under tsx, pdf.js is loaded before tsx's loader is: through it, pdf.js's sources and source maps
 * would take about 100 MB of the thread's heap, which the built gateway does not spend.
 */
function startThread(init: PdfThreadInit, resourceLimits: Worker['resourceLimits']): Worker {
  const here = import.meta.url;
  if (!here.endsWith('.ts')) {
    return new Worker(new URL('./pdf-thread.js', here), { workerData: init, resourceLimits });
  }
  const entry = new URL('./pdf-thread.ts', here).href;
  const pdfjs = ['pdfjs-dist/legacy/build/pdf.mjs', 'pdfjs-dist/legacy/build/pdf.worker.mjs'];
  const boot = `Promise.all(${JSON.stringify(pdfjs)}.map((m) => import(m))).then(() => import('tsx/esm/api')).then(({ register }) => { register(); return import(${JSON.stringify(entry)}); });`;
  return new Worker(boot, { eval: true, workerData: init, resourceLimits });
}
