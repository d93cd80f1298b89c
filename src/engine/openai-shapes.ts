import { randomBytes } from 'node:crypto';

/** vLLM-shaped response bodies and stream chunks. */

export type Api = 'chat' | 'completions';

export interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
}

export function usageOf(promptTokens: number, completionTokens: number): Usage {
  return {
    prompt_tokens: promptTokens,
    completion_tokens: completionTokens,
    total_tokens: promptTokens + completionTokens,
  };
}

export function responseId(api: Api, requestId: string | undefined): string {
  return `${api === 'chat' ? 'chatcmpl' : 'cmpl'}-${requestId || randomBytes(12).toString('hex')}`;
}

const ERROR_TYPES: Record<number, string> = {
  400: 'BadRequestError',
  404: 'NotFoundError',
  500: 'InternalServerError',
  503: 'ServiceUnavailableError',
};

export interface ErrorDetail {
  /** The request field at fault. */
  param?: string | undefined;
  /** A string code (OpenAI's style) instead of the status (vLLM's). */
  code?: string | undefined;
}

/** vLLM's `ErrorResponse`; `param` and a string `code` where a field is at fault, as OpenAI's. */
function errorObject(message: string, status: number, detail: ErrorDetail = {}) {
  return {
    object: 'error',
    message,
    type: ERROR_TYPES[status] ?? 'InternalServerError',
    param: detail.param ?? null,
    code: detail.code ?? status,
  };
}

export function errorBody(message: string, status: number, detail: ErrorDetail = {}): string {
  return JSON.stringify(errorObject(message, status, detail));
}

export interface Finish {
  reason: 'stop' | 'length' | 'tool_calls';
  stopReason: string | null;
}

export interface ToolCall {
  id: string;
  type: 'function';
  function: { name: string; arguments: string };
}

export function toolCallId(): string {
  return `call_${randomBytes(12).toString('hex')}`;
}

/** One SSE `data:` event per call. */
export class StreamChunks {
  private readonly head: Record<string, unknown>;

  constructor(
    private readonly api: Api,
    id: string,
    model: string,
    created: number,
  ) {
    this.head = { id, object: api === 'chat' ? 'chat.completion.chunk' : 'text_completion', created, model };
  }

  private event(choices: unknown[], extra: Record<string, unknown> = {}): string {
    return `data: ${JSON.stringify({ ...this.head, choices, ...extra })}\n\n`;
  }

  /** The first chat chunk; content is null when the answer is a tool call, as OpenAI's. */
  role(content: '' | null = ''): string {
    return this.event([
      { index: 0, delta: { role: 'assistant', content }, logprobs: null, finish_reason: null },
    ]);
  }

  /** The first chunk of a tool call: its id and function name, no arguments yet. */
  toolCallStart(id: string, name: string): string {
    const call = { index: 0, id, type: 'function', function: { name, arguments: '' } };
    return this.event([{ index: 0, delta: { tool_calls: [call] }, logprobs: null, finish_reason: null }]);
  }

  toolCallArguments(piece: string): string {
    const call = { index: 0, function: { arguments: piece } };
    return this.event([{ index: 0, delta: { tool_calls: [call] }, logprobs: null, finish_reason: null }]);
  }

  text(text: string): string {
    return this.api === 'chat'
      ? this.event([{ index: 0, delta: { content: text }, logprobs: null, finish_reason: null }])
      : this.event([{ index: 0, text, logprobs: null, finish_reason: null, stop_reason: null }]);
  }

  finish(finish: Finish): string {
    const end = { logprobs: null, finish_reason: finish.reason, stop_reason: finish.stopReason };
    return this.api === 'chat'
      ? this.event([{ index: 0, delta: {}, ...end }])
      : this.event([{ index: 0, text: '', ...end }]);
  }

  usage(usage: Usage): string {
    return this.event([], { usage });
  }

  /** A failure after the headers went out (the gateway's `UpstreamErrorFrame`). */
  error(message: string): string {
    return `data: ${JSON.stringify({ error: errorObject(message, 500) })}\n\n`;
  }
}

export const DONE = 'data: [DONE]\n\n';

export function completeBody(
  api: Api,
  id: string,
  model: string,
  created: number,
  text: string,
  finish: Finish,
  usage: Usage,
  toolCall?: ToolCall,
): string {
  const end = { logprobs: null, finish_reason: finish.reason, stop_reason: finish.stopReason };
  const message = toolCall
    ? { role: 'assistant', content: null, tool_calls: [toolCall] }
    : { role: 'assistant', content: text };
  const choice = api === 'chat' ? { index: 0, message, ...end } : { index: 0, text, ...end };
  return JSON.stringify({
    id,
    object: api === 'chat' ? 'chat.completion' : 'text_completion',
    created,
    model,
    choices: [choice],
    usage,
  });
}
