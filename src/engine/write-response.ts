import type { ServerResponse } from 'node:http';
import { sendJson, writeChunk } from './http-io.js';
import type { GenerationEnd } from './llama-engine.js';
import {
  type Api,
  completeBody,
  DONE,
  type Finish,
  StreamChunks,
  type ToolCall,
  toolCallId,
  usageOf,
} from './openai-shapes.js';
import type { PreparedRequest } from './prepare-request.js';
import { ToolCallText } from './tools.js';

export interface ResponseTarget {
  res: ServerResponse;
  api: Api;
  id: string;
  model: string;
  request: PreparedRequest;
  signal: AbortSignal;
}

export type Generate = (onText: (text: string) => void | Promise<void>) => Promise<GenerationEnd>;

/**
 * Runs a generation into the response: one JSON body at the end, or an SSE stream (a role chunk
 * for chat, a chunk per piece of text, the finish_reason chunk, the usage chunk when asked, then
 * `[DONE]`). A forced tool call answers `tool_calls` instead of content: streamed as a chunk
 * with the call's id and name, then chunks of its arguments. Writes nothing more once `signal`
 * aborts (the client is gone).
 */
export async function writeResponse(target: ResponseTarget, generate: Generate): Promise<void> {
  const { res, api, id, model, request, signal } = target;
  const created = Math.floor(Date.now() / 1000);
  const usage = (end: GenerationEnd) => usageOf(request.prompt.length, end.completionTokens);
  const finish = (end: GenerationEnd, call: boolean): Finish => ({
    // A call ends when its JSON is complete; cut short by max_tokens, it is still `length`.
    reason: call && end.finishReason === 'stop' ? 'tool_calls' : end.finishReason,
    stopReason: end.stopReason,
  });
  const plan = request.toolCall;

  if (!request.stream) {
    let text = '';
    let call: ToolCall | undefined;
    const calls = plan
      ? new ToolCallText(plan, {
          start: (name) => {
            call = { id: toolCallId(), type: 'function', function: { name, arguments: '' } };
          },
          arguments: (piece) => {
            call!.function.arguments += piece;
          },
        })
      : undefined;
    await calls?.begin();
    const end = await generate(async (piece) => {
      if (calls) await calls.push(piece);
      else text += piece;
    });
    await calls?.end();
    if (calls) text = calls.unparsed;
    if (!signal.aborted)
      sendJson(
        res,
        200,
        completeBody(api, id, model, created, text, finish(end, call !== undefined), usage(end), call),
      );
    return;
  }

  const chunks = new StreamChunks(api, id, model, created);
  res.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache' });
  if (api === 'chat') await writeChunk(res, chunks.role(plan ? null : ''));
  else res.flushHeaders();
  let started = false;
  const calls = plan
    ? new ToolCallText(plan, {
        start: (name) => {
          started = true;
          return writeChunk(res, chunks.toolCallStart(toolCallId(), name));
        },
        arguments: (piece) => writeChunk(res, chunks.toolCallArguments(piece)),
      })
    : undefined;
  let end: GenerationEnd;
  try {
    await calls?.begin();
    end = await generate((piece) => (calls ? calls.push(piece) : writeChunk(res, chunks.text(piece))));
    if (calls && !signal.aborted) {
      await calls.end();
      // Cut short before the function name: what was generated goes out as text.
      if (calls.unparsed) await writeChunk(res, chunks.text(calls.unparsed));
    }
  } catch (err) {
    // The status is out already: the failure goes in the stream, which ends without [DONE].
    res.end(chunks.error(`generation failed: ${(err as Error).message}`));
    throw new StreamFailed(err);
  }
  if (signal.aborted) return;
  await writeChunk(res, chunks.finish(finish(end, started)));
  if (request.includeUsage) await writeChunk(res, chunks.usage(usage(end)));
  res.end(DONE);
}

/** A generation failed after the stream began; the client has been told in the stream. */
export class StreamFailed extends Error {
  constructor(cause: unknown) {
    super(`generation failed mid-stream: ${(cause as Error).message}`, { cause });
  }
}
