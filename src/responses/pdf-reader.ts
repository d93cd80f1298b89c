import { type ChildProcess, spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { LRUCache } from 'lru-cache';
import { FileParserBusy, FileTooComplex, InvalidFile, UnsupportedFileType } from '../errors/file-errors.js';
import { GatewayShuttingDown, InternalError } from '../errors/http-errors.js';
import type { Logger } from '../observability/logger.js';
import type { GatewayMetrics } from '../observability/metrics.js';

/** The bounds of reading PDFs (`files.pdf` in the configuration). */
export interface PdfReaderOptions {
  /** Longest one PDF may be read for, once its reader has started. */
  timeoutMs: number;
  /** A PDF reader's JS heap, and the binary buffers it decodes streams into, each at most this. */
  maxMemoryMb: number;
  /** PDFs read at once, each in a process of its own. */
  concurrency: number;
  /** PDFs waiting for a reader; past it a request is refused (503 file_parser_busy). */
  maxQueued: number;
  /** Extracted texts kept by content hash, in MB of text. */
  cacheMb: number;
}

/** The one job a PDF reader process is given. */
export interface PdfJob {
  bytes: Uint8Array;
  maxPages: number;
  maxChars: number;
  /** The bound of the binary buffers it decodes streams into. */
  maxBufferBytes: number;
}

/** What a PDF reader says: ready for its job, then how it ended. */
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
/** Longest a PDF reader may take to start (load pdf.js) before the read fails as a gateway fault. */
const BOOT_TIMEOUT_MS = 30_000;
const MIB = 1024 * 1024;

/**
 * Reads the text of PDFs off the event loop: each PDF in a process of its own (pdf.js holds
 * nothing from one file when it reads the next, and a reader that runs out of memory, however it
 * dies, takes nothing else with it), killed past `timeoutMs` or when its memory passes
 * `maxMemoryMb`; at most `concurrency` readers at once, `maxQueued` PDFs waiting. What a file
 * gave is kept by its SHA-256 in a bounded LRU, so that a chain of responses reading the same PDF
 * (previous_response_id) reads it once; one PDF sent by several requests at once is read once too.
 */
export class PdfReader {
  private readonly cache: LRUCache<string, Outcome>;
  private readonly reading = new Map<string, Promise<Outcome>>();
  private readonly readers = new Set<ChildProcess>();
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
      const outcome = await this.runReader(bytes);
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

  /** A reader is free: the next PDF waiting takes it. */
  private release(): void {
    const next = this.waiting.shift();
    if (next) next.go();
    else this.running--;
  }

  /** Reads one PDF in a new process, killed as soon as it has answered or passed a bound. */
  private runReader(bytes: Uint8Array): Promise<Outcome> {
    const { timeoutMs, maxMemoryMb } = this.options;
    return new Promise<Outcome>((resolve, reject) => {
      const reader = startReader(maxMemoryMb);
      this.readers.add(reader);
      let ready = false;
      let settled = false;
      let timer = setTimeout(() => end(new InternalError('The PDF reader did not start.')), BOOT_TIMEOUT_MS);
      const end = (result: Outcome | Error): void => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        this.readers.delete(reader);
        reader.kill('SIGKILL');
        if (result instanceof Error) reject(result);
        else resolve(result);
      };
      reader.on('message', (message: PdfThreadMessage) => {
        switch (message.type) {
          case 'ready': {
            ready = true;
            clearTimeout(timer);
            const job: PdfJob = {
              bytes,
              maxPages: PDF_MAX_PAGES,
              maxChars: PDF_MAX_CHARS,
              maxBufferBytes: maxMemoryMb * MIB,
            };
            reader.send(job, (err) => {
              if (err) end({ kind: 'too_complex', bound: 'memory' });
            });
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
      reader.on('error', (err: Error) => {
        this.log?.error({ err }, 'the PDF reader process failed');
        end(new InternalError('The PDF reader failed to start.'));
      });
      reader.on('exit', (code, signal) => {
        if (this.closed) return end(new GatewayShuttingDown());
        // Dying while it read, before any answer, is running out of what it may use: V8 aborts
        // a process past its heap limit (SIGABRT), whatever pdf.js was allocating.
        if (ready) return end({ kind: 'too_complex', bound: 'memory' });
        this.log?.error({ code, signal }, 'the PDF reader process ended before it was ready');
        end(new InternalError('The PDF reader failed to start.'));
      });
    });
  }

  /** Kills every PDF reader; PDFs waiting for one are refused. */
  async close(): Promise<void> {
    this.closed = true;
    for (const waiter of this.waiting.splice(0)) waiter.fail(new GatewayShuttingDown());
    await Promise.all(
      [...this.readers].map((reader) => {
        const exited = new Promise((resolve) => reader.once('exit', resolve));
        reader.kill('SIGKILL');
        return reader.exitCode === null && reader.signalCode === null ? exited : undefined;
      }),
    );
  }
}

/**
 * A reader process: the built file, or under tsx the TypeScript source (tests, `tsx
 * src/cli/main.ts`). Under tsx, pdf.js is loaded before tsx's loader is: through it, pdf.js's
 * sources and source maps would take about 100 MB of the reader's heap, which the built gateway
 * does not spend. It inherits no environment (nothing of the gateway's secrets), no stdout, and
 * its stderr is dropped (V8's report of its own death); it talks over IPC (structured clone).
 */
function startReader(maxMemoryMb: number): ChildProcess {
  const flags = [
    `--max-old-space-size=${maxMemoryMb}`,
    `--max-semi-space-size=${Math.min(16, Math.max(1, Math.floor(maxMemoryMb / 16)))}`,
    '--disallow-code-generation-from-strings',
  ];
  const options = {
    stdio: ['ignore', 'ignore', 'ignore', 'ipc'] as ('ignore' | 'ipc')[],
    serialization: 'advanced' as const,
    env: {},
  };
  const here = import.meta.url;
  if (!here.endsWith('.ts')) {
    return spawn(process.execPath, [...flags, fileURLToPath(new URL('./pdf-thread.js', here))], options);
  }
  const entry = new URL('./pdf-thread.ts', here).href;
  const pdfjs = ['pdfjs-dist/legacy/build/pdf.mjs', 'pdfjs-dist/legacy/build/pdf.worker.mjs'].map((m) =>
    import.meta.resolve(m),
  );
  const tsx = import.meta.resolve('tsx/esm/api');
  const boot = `Promise.all(${JSON.stringify(pdfjs)}.map((m) => import(m))).then(() => import(${JSON.stringify(tsx)})).then(({ register }) => { register(); return import(${JSON.stringify(entry)}); });`;
  return spawn(process.execPath, [...flags, '--input-type=module', '--eval', boot], options);
}
