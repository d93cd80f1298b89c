import { SluiceError } from './base.js';

/**
 * A file (a PDF) whose reading passed the gateway's bounds (`files.pdf.timeoutMs`,
 * `files.pdf.maxMemoryMb`): a property of the file, so not worth sending again as it is.
 */
export class FileTooComplex extends SluiceError {
  readonly code = 'file_too_complex';
  readonly retryable = false;
  override readonly status = 400;
  override readonly type = 'invalid_request_error' as const;
  override readonly param: string | null;
  constructor(filename: string, why: string, param: string | null = 'input') {
    super(
      `The PDF '${filename}' is too complex to read: ${why}. Send its text instead (an input_text part, or a text file).`,
    );
    this.param = param;
  }
}

/** Every PDF reader is busy and the PDFs waiting for one are at their bound: sent again shortly, it may pass. */
export class FileParserBusy extends SluiceError {
  readonly code = 'file_parser_busy';
  readonly retryable = true;
  override readonly status = 503;
  override readonly type = 'service_unavailable_error' as const;
  constructor(readonly capacity: number) {
    super(`The gateway is reading ${capacity} PDFs already: send the request again shortly.`);
  }
  override headers(): Record<string, string> {
    return { 'retry-after': '1' };
  }
}
