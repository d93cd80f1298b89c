/** How a response ends: its final status, its terminal event, what a draft terminal saves to retract. */
import type { BuiltEvent } from './event-sequence.js';
import type { OutputItem, ResponseObject, ResponseStatus } from './types.js';

export type TerminalKind =
  | { kind: 'finished'; finishReason: string | undefined }
  | { kind: 'failed'; code: string; message: string }
  /** Cut short by a bound of the gateway (the MCP tool loop's turns): `incomplete_details.reason`. */
  | { kind: 'incomplete'; reason: string }
  | { kind: 'cancelled' };

/** A terminal not yet published: the closing events, then the terminal event around the final JSON. */
export interface TerminalDraft {
  responseJson: string;
  eventJson: string;
  type: string;
  status: ResponseStatus;
  closing: BuiltEvent[];
}

/**
 * The final status of a response that ended as `end` (`finishReason`: the engine's, when `end`
 * names none); sets its `incomplete_details` or `error` to match.
 */
export function endStatus(
  response: ResponseObject,
  end: TerminalKind,
  finishReason: string | undefined,
): ResponseStatus {
  if (end.kind === 'finished') {
    const reason = end.finishReason ?? finishReason;
    if (reason !== 'length' && reason !== 'content_filter') return 'completed';
    response.incomplete_details = { reason: reason === 'length' ? 'max_output_tokens' : 'content_filter' };
    return 'incomplete';
  }
  if (end.kind === 'incomplete') {
    response.incomplete_details = { reason: end.reason };
    return 'incomplete';
  }
  if (end.kind === 'failed') {
    response.error = { code: end.code, message: end.message };
    return 'failed';
  }
  response.error = { code: 'response_cancelled', message: 'The response was cancelled.' };
  return 'cancelled';
}

/** The terminal event's type for a final status (a cancelled response ends with `response.failed`). */
export function terminalType(status: ResponseStatus): string {
  return status === 'completed'
    ? 'response.completed'
    : status === 'incomplete'
      ? 'response.incomplete'
      : 'response.failed';
}

/** The terminal event's JSON text around the exact JSON text of the final response. */
export function terminalEventJson(type: string, sequence: number, responseJson: string): string {
  return `{"type":"${type}","sequence_number":${sequence},"response":${responseJson}}`;
}

/** What a terminal draft changes on the response object, saved to retract the draft. */
export interface ResponseFieldsSaved {
  statuses: OutputItem['status'][];
  status: ResponseStatus;
  completedAt: number | null;
  error: ResponseObject['error'];
  incompleteDetails: ResponseObject['incomplete_details'];
}

export function saveResponseFields(response: ResponseObject): ResponseFieldsSaved {
  return {
    statuses: response.output.map((item) => item.status),
    status: response.status,
    completedAt: response.completed_at,
    error: response.error,
    incompleteDetails: response.incomplete_details,
  };
}

export function restoreResponseFields(response: ResponseObject, saved: ResponseFieldsSaved): void {
  saved.statuses.forEach((status, index) => {
    const item = response.output[index];
    if (item) (item as { status: OutputItem['status'] }).status = status;
  });
  response.status = saved.status;
  response.completed_at = saved.completedAt;
  response.error = saved.error;
  response.incomplete_details = saved.incompleteDetails;
}
