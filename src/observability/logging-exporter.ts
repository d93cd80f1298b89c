import { ExportResultCode } from '@opentelemetry/core';
import type { ReadableSpan, SpanExporter } from '@opentelemetry/sdk-trace-base';
import type { Logger } from './logger.js';

/** Export failures are logged at most this often. */
const EXPORT_WARN_INTERVAL_MS = 60_000;

/** Logs export failures (rate-limited) instead of leaving them to the silent OpenTelemetry diag logger. */
export class LoggingExporter implements SpanExporter {
  private lastWarnAt = 0;
  constructor(
    private readonly inner: SpanExporter,
    private readonly log: Logger,
    private readonly endpoint: string,
  ) {}

  export(spans: ReadableSpan[], done: Parameters<SpanExporter['export']>[1]): void {
    this.inner.export(spans, (result) => {
      if (result.code !== ExportResultCode.SUCCESS) {
        const now = Date.now();
        if (now - this.lastWarnAt >= EXPORT_WARN_INTERVAL_MS) {
          this.lastWarnAt = now;
          this.log.warn(
            { endpoint: this.endpoint, spans: spans.length, err: result.error?.message },
            'trace export failed',
          );
        }
      }
      done(result);
    });
  }

  shutdown(): Promise<void> {
    return this.inner.shutdown();
  }

  forceFlush(): Promise<void> {
    return this.inner.forceFlush?.() ?? Promise.resolve();
  }
}
