import type { IncomingMessage } from 'node:http';
import { contentText } from './engine-tokens.js';
import {
  Completion,
  continuePrefix,
  continueSuffix,
  countWords,
  FROM_START,
  type Start,
  TOOL_ARGUMENT_PIECES,
} from './generate.js';
import { header } from './http-io.js';
import { DocumentCompletion, documentFor } from './json-document.js';
import { type Api, toolCallId } from './sse.js';
import type { Plan } from './stream.js';

/** Reading a generation request: its body's fields, its headers, its tool script, and the plan they make. */

export interface GenerationRequest {
  model?: unknown;
  stream?: unknown;
  max_tokens?: unknown;
  max_completion_tokens?: unknown;
  n?: unknown;
  stop?: unknown;
  messages?: unknown;
  prompt?: unknown;
  stream_options?: unknown;
  tools?: unknown;
  tool_choice?: unknown;
  /** `json_object` or `json_schema`: the answer is a JSON document (json-document.ts). */
  response_format?: unknown;
  continue_final_message?: unknown;
  add_generation_prompt?: unknown;
  /** vLLM's: the request's place in an engine that schedules by priority (lower first). */
  priority?: unknown;
}

/** A request the mock refuses with a 400. */
export class BadRequest extends Error {}

function positiveInt(
  body: GenerationRequest,
  name: 'max_tokens' | 'max_completion_tokens' | 'n',
): number | undefined {
  const value = body[name];
  if (value === undefined || value === null) return undefined;
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 1) {
    throw new BadRequest(`${name} must be an integer >= 1, got ${JSON.stringify(value)}.`);
  }
  return value;
}

function stopsOf(stop: unknown): string[] {
  if (typeof stop === 'string') return [stop];
  if (Array.isArray(stop)) return stop.filter((s): s is string => typeof s === 'string');
  return [];
}

/** The function a request asks the mock to call: `x-mock-tool-call`, else a named or required tool_choice. */
function toolNameOf(req: IncomingMessage, body: GenerationRequest): string | undefined {
  if (!Array.isArray(body.tools) || body.tools.length === 0) return undefined;
  const forced = header(req, 'x-mock-tool-call');
  if (forced) return forced;
  const choice = body.tool_choice as { function?: { name?: unknown } } | string | null | undefined;
  if (typeof choice === 'object' && typeof choice?.function?.name === 'string') return choice.function.name;
  if (choice === 'required') {
    const first = (body.tools[0] as { function?: { name?: unknown } } | null)?.function?.name;
    return typeof first === 'string' ? first : undefined;
  }
  return undefined;
}

/** One step of an `x-mock-tool-script`: call `name` with `arguments`, and/or apply `fault`. */
export interface ScriptStep {
  name?: string;
  arguments?: unknown;
  fault?: string;
}

/**
 * A scripted tool loop: `x-mock-tool-script` holds a JSON array of steps (or one step). The step
 * used is the number of tool results (`role: "tool"` messages) after the last user message, so
 * step 0 answers the first request, step 1 the request that carries the first tool result, ...
 * A step with `name` calls that function with `arguments` (a JSON value, or a string sent as
 * is) when `tools` offers it, and answers in text otherwise; a step without `name`, or past the
 * end of the script, answers in text. A step's `fault` applies to its request (as `x-mock-fault`),
 * not to a continuation of it (`continue_final_message`, mid-stream resume).
 */
export function scriptStepOf(req: IncomingMessage, body: GenerationRequest): ScriptStep | undefined {
  const raw = header(req, 'x-mock-tool-script');
  if (raw === undefined) return undefined;
  let script: unknown;
  try {
    script = JSON.parse(raw);
  } catch {
    throw new BadRequest('x-mock-tool-script is not JSON.');
  }
  const steps = (Array.isArray(script) ? script : [script]) as (ScriptStep | null)[];
  const messages = Array.isArray(body.messages) ? (body.messages as ({ role?: unknown } | null)[]) : [];
  let results = 0;
  for (let i = messages.length - 1; i >= 0 && messages[i]?.role !== 'user'; i--) {
    if (messages[i]?.role === 'tool') results++;
  }
  const step = steps[results];
  return step && typeof step === 'object' ? step : {};
}

function offers(body: GenerationRequest, name: string): boolean {
  return (
    Array.isArray(body.tools) &&
    body.tools.some((t) => (t as { function?: { name?: unknown } } | null)?.function?.name === name)
  );
}

function piecesOf(text: string): string[] {
  return Array.from({ length: Math.max(1, Math.ceil(text.length / 4)) }, (_, i) =>
    text.slice(i * 4, i * 4 + 4),
  );
}

/**
 * What a request generates: its completion (continued where a continuation asks), a tool call
 * (asked for, or scripted by `step`), reasoning tokens, and the usage. Throws BadRequest.
 */
export function planOf(
  req: IncomingMessage,
  body: GenerationRequest,
  api: Api,
  step: ScriptStep | undefined,
  defaultMaxTokens: number,
): Plan {
  const maxTokens = positiveInt(body, 'max_tokens') ?? positiveInt(body, 'max_completion_tokens');
  const choices = positiveInt(body, 'n') ?? 1;
  let promptText: string;
  let start: Start = FROM_START;
  if (api === 'chat') {
    if (body.messages !== undefined && !Array.isArray(body.messages))
      throw new BadRequest('messages must be a list.');
    const messages = (body.messages ?? []) as ({ role?: unknown; content?: unknown } | null)[];
    promptText = messages.map((m) => contentText(m?.content)).join(' ');
    const last = messages.at(-1);
    if (
      body.continue_final_message === true &&
      body.add_generation_prompt === false &&
      last?.role === 'assistant'
    ) {
      start = continuePrefix(contentText(last.content)) ?? FROM_START;
    }
  } else {
    const prompt = body.prompt;
    promptText = Array.isArray(prompt)
      ? prompt.map((p) => (Array.isArray(p) ? p.join(' ') : String(p))).join(' ')
      : typeof prompt === 'string'
        ? prompt
        : '';
    if (typeof prompt === 'string') start = continueSuffix(prompt) ?? FROM_START;
  }
  const document = api === 'chat' ? documentFor(body.response_format, maxTokens ?? 8) : undefined;
  const completion = document
    ? new DocumentCompletion(document)
    : new Completion(start, maxTokens, defaultMaxTokens, stopsOf(body.stop));
  let toolName = api === 'chat' && step === undefined ? toolNameOf(req, body) : undefined;
  let argumentPieces: string[] | undefined;
  if (api === 'chat' && step?.name !== undefined && offers(body, step.name)) {
    toolName = step.name;
    const args = step.arguments === undefined ? {} : step.arguments;
    argumentPieces = piecesOf(typeof args === 'string' ? args : JSON.stringify(args));
  }
  const reasoningHeader = Number(header(req, 'x-mock-reasoning') ?? 0);
  const reasoningTokens =
    api === 'chat' && Number.isInteger(reasoningHeader) && reasoningHeader > 0 ? reasoningHeader : 0;
  const perChoice =
    reasoningTokens + (toolName ? 1 + (argumentPieces ?? TOOL_ARGUMENT_PIECES).length : completion.generated);
  const promptTokens = countWords(promptText);
  const completionTokens = perChoice * choices;
  const streamOptions = body.stream_options as { include_usage?: unknown } | null | undefined;
  return {
    choices,
    completion,
    reasoningTokens,
    tool: toolName
      ? { name: toolName, callIds: Array.from({ length: choices }, toolCallId), argumentPieces }
      : undefined,
    usage: {
      prompt_tokens: promptTokens,
      completion_tokens: completionTokens,
      total_tokens: promptTokens + completionTokens,
    },
    includeUsage: streamOptions?.include_usage === true,
  };
}
