import { SluiceError } from './base.js';
import { InvalidRequest } from './request-errors.js';

/** Files sent in a request (`input_file` parts): what the gateway cannot read, and its PDF readers' capacity. */

/** A file of a media type the gateway does not read, or a PDF without a text layer. */
export class UnsupportedFileType extends InvalidRequest {
  readonly code = 'unsupported_file_type';
  constructor(message: string, param: string) {
    super(message, param);
  }
}

/** A file sent by reference (`file_id`, `file_url`): the gateway has no Files API and fetches nothing. */
export class UnsupportedFileReference extends InvalidRequest {
  readonly code = 'unsupported_file_reference';
  constructor(message: string, param: string) {
    super(message, param);
  }
}

/** A file that claims to be of a type it reads (a PDF) but cannot be read as one. */
export class InvalidFile extends InvalidRequest {
  readonly code = 'invalid_file';
  constructor(message: string, param: string) {
    super(message, param);
  }
}

/**
 * A file (a PDF) whose reading passed the gateway's bounds (`files.pdf.timeoutMs`,
 * `files.pdf.maxMemoryMb`): a property of the file, so not worth sending again as it is.
 */
export class FileTooComplex extends InvalidRequest {
  readonly code = 'file_too_complex';
  constructor(filename: string, why: string, param: string | null = 'input') {
    super(
      `The PDF '${filename}' is too complex to read: ${why}. Send its text instead (an input_text part, or a text file).`,
      param,
    );
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
