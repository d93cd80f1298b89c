import type { ServerResponse } from 'node:http';
import { sendJson, writeChunk } from './http-io.js';
import type { GenerationEnd } from './llama-engine.js';
import { type Api, completeBody, DONE, StreamChunks, usageOf } from './openai-shapes.js';
import type { PreparedRequest } from './prepare-request.js';

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
 * `[DONE]`). Writes nothing more once `signal` aborts (the client is gone).
 */
export async function writeResponse(target: ResponseTarget, generate: Generate): Promise<void> {
  const { res, api, id, model, request, signal } = target;
  const created = Math.floor(Date.now() / 1000);
  const usage = (end: GenerationEnd) => usageOf(request.prompt.length, end.completionTokens);
  const finish = (end: GenerationEnd) => ({ reason: end.finishReason, stopReason: end.stopReason });

  if (!request.stream) {
    let text = '';
    const end = await generate((piece) => {
      text += piece;
    });
    if (!signal.aborted)
      sendJson(res, 200, completeBody(api, id, model, created, text, finish(end), usage(end)));
    return;
  }

  const chunks = new StreamChunks(api, id, model, created);
  res.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache' });
  if (api === 'chat') await writeChunk(res, chunks.role());
  else res.flushHeaders();
  let end: GenerationEnd;
  try {
    end = await generate((piece) => writeChunk(res, chunks.text(piece)));
  } catch (err) {
    // The status is out already: the failure goes in the stream, which ends without [DONE].
    res.end(chunks.error(`generation failed: ${(err as Error).message}`));
    throw new StreamFailed(err);
  }
  if (signal.aborted) return;
  await writeChunk(res, chunks.finish(finish(end)));
  if (request.includeUsage) await writeChunk(res, chunks.usage(usage(end)));
  res.end(DONE);
}

/** A generation failed after the stream began; the client has been told in the stream. */
export class StreamFailed extends Error {
  constructor(cause: unknown) {
    super(`generation failed mid-stream: ${(cause as Error).message}`, { cause });
  }
}
