import { z } from 'zod';
import type { Engine } from '../dispatch/engine.js';
import type { ModelRule } from '../dispatch/types.js';
import { MissingParameter } from '../errors/request-errors.js';
import { UpstreamBadResponse } from '../errors/upstream-errors.js';
import type { Store } from '../storage/types.js';
import type { Usage } from '../streams/chat-stream-tracker.js';
import { assertOutputsAnswerCalls } from './call-outputs.js';
import { encodeCompaction } from './compaction-item.js';
import { contextSource, resolveContext } from './context.js';
import { newId } from './ids.js';
import { extractPdfTexts } from './input-files.js';
import { normaliseInput } from './input-items.js';
import type { Caller } from './ownership.js';
import type { PdfReader } from './pdf-reader.js';
import { type CreateResponseRequest, inputItemSchema } from './request-schema.js';
import { toResponseUsage } from './response-usage.js';
import { contextToMessages } from './to-chat.js';
import type { InputItem, OutputItem, ResponseUsage } from './types.js';

/** The body of `POST /v1/responses/compact` (Open Responses `CompactResponseMethodPublicBody`). */
export const compactRequestSchema = z.looseObject({
  model: z.string().min(1),
  input: z
    .union([z.string(), z.array(inputItemSchema)])
    .nullable()
    .optional(),
  previous_response_id: z.string().min(1).nullable().optional(),
  instructions: z.string().nullable().optional(),
});
export type CompactRequest = z.output<typeof compactRequestSchema>;

/** What the model is asked, after the conversation, to write the summary. */
const COMPACTION_PROMPT =
  'Context checkpoint: the conversation above is about to be replaced by a summary that you write now, ' +
  'for your own use when the work continues. Keep everything needed to go on: the user’s goals, ' +
  'constraints and preferences, facts and decisions established, results of tool calls, what has been ' +
  'done and what is still open. Be concise but complete. Write only the summary.';

export interface CompactionItem {
  id: string;
  type: 'compaction';
  encrypted_content: string;
}

export interface CompactedResponse {
  id: string;
  object: 'response.compaction';
  created_at: number;
  output: (InputItem | CompactionItem)[];
  usage: ResponseUsage;
}

export interface CompactCall {
  request: CompactRequest;
  requestId: string;
  headers: Record<string, string>;
  signal: AbortSignal;
  receivedAt: number;
  caller: Caller;
  /** Which models the calling key may use (undefined: every model); the model's fallbacks obey it. */
  mayUse: ModelRule | undefined;
  /** Reads the PDFs of `input_file` parts. */
  pdf: PdfReader;
}

/**
 * `POST /v1/responses/compact`: the conversation (`previous_response_id`'s chain, then `input`)
 * is summarised by the model through the normal dispatch path (one non-streaming chat request),
 * and answered as a `response.compaction` whose output is, as OpenAI shapes it, every user
 * message followed by one compaction item. Given back as input, that is a shorter history:
 * the user messages, then the summary, instead of every assistant turn and tool call.
 */
export async function compactConversation(
  dispatcher: Pick<Engine, 'assertModel' | 'complete'>,
  store: Store | undefined,
  call: CompactCall,
): Promise<CompactedResponse> {
  const { request } = call;
  dispatcher.assertModel(request.model);
  const context = await resolveContext(
    store,
    { previous_response_id: request.previous_response_id } as CreateResponseRequest,
    call.caller,
  );
  const input = request.input == null ? [] : normaliseInput(request.input);
  assertOutputsAnswerCalls(context.history, input, contextSource(context, 'input'));
  const items: (InputItem | OutputItem)[] = [...context.history, ...input];
  if (items.length === 0) {
    throw new MissingParameter(
      'There is nothing to compact: send input and/or previous_response_id.',
      'input',
    );
  }
  await extractPdfTexts(call.pdf, items);
  const messages = contextToMessages(request.instructions, items);
  messages.push({ role: 'user', content: COMPACTION_PROMPT });
  const completed = await dispatcher.complete({
    api: 'responses',
    path: '/v1/chat/completions',
    model: request.model,
    payload: JSON.stringify({ model: request.model, messages, stream: false }),
    stream: false,
    requestId: call.requestId,
    route: { model: request.model, text: undefined, hashKey: undefined },
    rank: undefined,
    headers: call.headers,
    signal: call.signal,
    receivedAt: call.receivedAt,
    mayUse: call.mayUse,
  });
  const choice = (completed.json.choices as { message?: { content?: unknown } }[] | undefined)?.[0];
  const summary = choice?.message?.content;
  if (typeof summary !== 'string' || summary.trim() === '') {
    throw completed.attempt.worker.redactError(
      new UpstreamBadResponse(
        completed.attempt.worker.id,
        'its answer to the compaction request has no text',
      ),
    );
  }
  const usage = completed.json.usage as Usage | undefined;
  const userMessages = items.filter(
    (item): item is InputItem => item.type === 'message' && (item as { role?: unknown }).role === 'user',
  );
  return {
    id: newId('resp'),
    object: 'response.compaction',
    created_at: Math.floor(Date.now() / 1000),
    output: [
      ...userMessages,
      { id: newId('cmp'), type: 'compaction', encrypted_content: encodeCompaction(summary) },
    ],
    usage: toResponseUsage(usage ?? { prompt_tokens: 0, completion_tokens: 0, total_tokens: 0 }),
  };
}
