import { randomBytes } from 'node:crypto';

/** Builders of vLLM-shaped response bodies. Fixed parts are rendered once per request. */

export type Api = 'chat' | 'completions';

export interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
}

export const TOOL_ARGUMENTS = '{"city":"Paris","unit":"celsius"}';

export function responseId(api: Api): string {
  return `${api === 'chat' ? 'chatcmpl' : 'cmpl'}-${randomBytes(12).toString('hex')}`;
}

export class ChunkWriter {
  private readonly head: string;

  constructor(
    readonly api: Api,
    readonly id: string,
    readonly model: string,
    readonly created: number,
  ) {
    const object = api === 'chat' ? 'chat.completion.chunk' : 'text_completion';
    this.head = `data: {"id":"${id}","object":"${object}","created":${created},"model":${JSON.stringify(model)},"choices":[`;
  }

  private event(choice: string): string {
    return `${this.head}${choice}]}\n\n`;
  }

  role(index: number): string {
    return this.event(
      `{"index":${index},"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}`,
    );
  }

  content(index: number, text: string): string {
    const value = JSON.stringify(text);
    return this.api === 'chat'
      ? this.event(`{"index":${index},"delta":{"content":${value}},"logprobs":null,"finish_reason":null}`)
      : this.event(
          `{"index":${index},"text":${value},"logprobs":null,"finish_reason":null,"stop_reason":null}`,
        );
  }

  reasoning(index: number, text: string): string {
    return this.event(
      `{"index":${index},"delta":{"reasoning_content":${JSON.stringify(text)}},"logprobs":null,"finish_reason":null}`,
    );
  }

  toolCallStart(index: number, callId: string, name: string): string {
    return this.event(
      `{"index":${index},"delta":{"tool_calls":[{"index":0,"id":"${callId}","type":"function","function":{"name":${JSON.stringify(name)},"arguments":""}}]},"logprobs":null,"finish_reason":null}`,
    );
  }

  toolCallArguments(index: number, fragment: string): string {
    return this.event(
      `{"index":${index},"delta":{"tool_calls":[{"index":0,"function":{"arguments":${JSON.stringify(fragment)}}}]},"logprobs":null,"finish_reason":null}`,
    );
  }

  finish(index: number, reason: string): string {
    return this.api === 'chat'
      ? this.event(
          `{"index":${index},"delta":{},"logprobs":null,"finish_reason":"${reason}","stop_reason":null}`,
        )
      : this.event(
          `{"index":${index},"text":"","logprobs":null,"finish_reason":"${reason}","stop_reason":null}`,
        );
  }

  usage(usage: Usage): string {
    return `${this.head}],"usage":${JSON.stringify(usage)}}\n\n`;
  }
}

export interface ChoiceResult {
  text: string;
  reasoning: string;
  toolCall: { id: string; name: string; arguments: string } | undefined;
  finishReason: string;
}

/** The whole non-streaming body. */
export function completeBody(
  api: Api,
  id: string,
  model: string,
  created: number,
  choices: ChoiceResult[],
  usage: Usage,
): string {
  if (api === 'chat') {
    return JSON.stringify({
      id,
      object: 'chat.completion',
      created,
      model,
      choices: choices.map((c, index) => ({
        index,
        message: {
          role: 'assistant',
          content: c.toolCall ? null : c.text,
          ...(c.reasoning ? { reasoning_content: c.reasoning } : {}),
          ...(c.toolCall
            ? {
                tool_calls: [
                  {
                    id: c.toolCall.id,
                    type: 'function',
                    function: { name: c.toolCall.name, arguments: c.toolCall.arguments },
                  },
                ],
              }
            : {}),
        },
        logprobs: null,
        finish_reason: c.finishReason,
        stop_reason: null,
      })),
      usage,
    });
  }
  return JSON.stringify({
    id,
    object: 'text_completion',
    created,
    model,
    choices: choices.map((c, index) => ({
      index,
      text: c.text,
      logprobs: null,
      finish_reason: c.finishReason,
      stop_reason: null,
    })),
    usage,
  });
}

/** vLLM's error body (`ErrorResponse`). */
export function engineError(message: string, type: string, code: number): string {
  return JSON.stringify({ object: 'error', message, type, param: null, code });
}
