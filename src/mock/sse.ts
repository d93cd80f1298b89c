import { randomBytes } from 'node:crypto';

/**
 * The SSE events of one streamed response, shaped like vLLM's OpenAI server. Everything fixed
 * (the chunk head with id, object, created and model; each choice's prefix) is rendered once per
 * response, so a token event is three string concatenations.
 */

export type Api = 'chat' | 'completions';

export interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
}

export function responseId(api: Api): string {
  return `${api === 'chat' ? 'chatcmpl' : 'cmpl'}-${randomBytes(12).toString('hex')}`;
}

export function toolCallId(): string {
  return `call_${randomBytes(12).toString('hex')}`;
}

export const DONE = 'data: [DONE]\n\n';

/** A truncated JSON frame (`malformed_after`). */
export const MALFORMED = 'data: {"id":"x","choices":[{"delta":{"content":"oops"\n\n';

const FAILURE = 'injected engine failure (sluice mock)';

/** vLLM's in-band error frame: its ErrorResponse (integer code) under `error`. */
export const ERROR_FRAME = `data: ${JSON.stringify({
  error: { object: 'error', message: FAILURE, type: 'InternalServerError', param: null, code: 500 },
})}\n\n`;

/** The string-code in-band error frame (OpenAI / SGLang style). */
export const ERROR_FRAME_STR = `data: ${JSON.stringify({
  error: { message: FAILURE, type: 'server_error', code: 'internal_error' },
})}\n\n`;

/** An SSE `error` event. */
export const EVENT_ERROR = `event: error\ndata: ${JSON.stringify({ message: FAILURE })}\n\n`;

const OPEN = '{"index":';
const PENDING = ',"logprobs":null,"finish_reason":null}]}\n\n';
const PENDING_COMPLETION = ',"logprobs":null,"finish_reason":null,"stop_reason":null}]}\n\n';

export class ChunkWriter {
  private readonly head: string;
  /** Per choice: the event up to the token's JSON string. */
  private readonly tokenHead: string[];
  private readonly reasoningHead: string[];
  private readonly argumentsHead: string[];

  constructor(
    readonly api: Api,
    id: string,
    model: string,
    created: number,
    choices: number,
  ) {
    const object = api === 'chat' ? 'chat.completion.chunk' : 'text_completion';
    this.head = `data: {"id":"${id}","object":"${object}","created":${created},"model":${JSON.stringify(model)},"choices":[`;
    const each = (f: (c: number) => string) => Array.from({ length: choices }, (_, c) => f(c));
    this.tokenHead = each((c) =>
      api === 'chat' ? `${this.head}${OPEN}${c},"delta":{"content":` : `${this.head}${OPEN}${c},"text":`,
    );
    this.reasoningHead = each((c) => `${this.head}${OPEN}${c},"delta":{"reasoning_content":`);
    this.argumentsHead = each(
      (c) => `${this.head}${OPEN}${c},"delta":{"tool_calls":[{"index":0,"function":{"arguments":`,
    );
  }

  role(c: number): string {
    return `${this.head}${OPEN}${c},"delta":{"role":"assistant","content":""}${PENDING}`;
  }

  /** A content delta (chat) or text piece (completions); `json` is the JSON string of the text. */
  token(c: number, json: string): string {
    return this.api === 'chat'
      ? `${this.tokenHead[c]}${json}}${PENDING}`
      : `${this.tokenHead[c]}${json}${PENDING_COMPLETION}`;
  }

  reasoning(c: number, json: string): string {
    return `${this.reasoningHead[c]}${json}}${PENDING}`;
  }

  toolCallStart(c: number, callId: string, name: string): string {
    const call = `{"index":0,"id":"${callId}","type":"function","function":{"name":${JSON.stringify(name)},"arguments":""}}`;
    return `${this.head}${OPEN}${c},"delta":{"tool_calls":[${call}]}${PENDING}`;
  }

  toolCallArguments(c: number, json: string): string {
    return `${this.argumentsHead[c]}${json}}}]}${PENDING}`;
  }

  finish(c: number, reason: string): string {
    const choice =
      this.api === 'chat'
        ? `${OPEN}${c},"delta":{},"logprobs":null,"finish_reason":"${reason}","stop_reason":null}`
        : `${OPEN}${c},"text":"","logprobs":null,"finish_reason":"${reason}","stop_reason":null}`;
    return `${this.head}${choice}]}\n\n`;
  }

  usage(usage: Usage): string {
    return `${this.head}],"usage":${JSON.stringify(usage)}}\n\n`;
  }
}
