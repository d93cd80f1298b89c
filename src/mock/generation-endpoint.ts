import type { IncomingMessage, ServerResponse } from 'node:http';
import { type ChoiceResult, completeBody, engineError, errorTypeOf } from './bodies.js';
import { EngineRejected } from './engine-model.js';
import type { EngineRun, MockEngine } from './engine-run.js';
import { FaultSpecError, type Faults, parseFault } from './faults.js';
import { reasoningText, TOOL_ARGUMENTS } from './generate.js';
import {
  BadRequest,
  type GenerationRequest,
  planOf,
  type ScriptStep,
  scriptStepOf,
} from './generation-request.js';
import { header, readBody, send, sendError } from './http-io.js';
import { type Api, ChunkWriter, responseId } from './sse.js';
import { cutConnection, Life, MockStream, type Pacing, type Plan } from './stream.js';
import type { WorkerState } from './worker-state.js';

/** What a worker's generation endpoints are set up with (its options, resolved). */
export interface GenerationSettings {
  models: readonly string[];
  /** Data-parallel size: `x-data-parallel-rank` must fall in [0, dpSize). */
  dpSize: number;
  /** Tokens generated when a request sets no max_tokens. */
  defaultMaxTokens: number;
  pacing: Pacing;
  /** The engine model that paces generation instead of `pacing.intervalMs` (engine-run.ts); none by default. */
  engine?: MockEngine | undefined;
}

/**
 * `POST /v1/chat/completions` and `POST /v1/completions`: counts the request, checks it, picks
 * its faults (a tool script's step, else `x-mock-fault`, else the worker's), then answers it as
 * a stream (see stream.ts) or, when generation is done, as one body.
 */
export async function generate(
  req: IncomingMessage,
  res: ServerResponse,
  api: Api,
  settings: GenerationSettings,
  state: WorkerState,
): Promise<void> {
  const raw = await readBody(req);
  state.received(req);
  const rankHeader = header(req, 'x-data-parallel-rank');

  let body: GenerationRequest;
  try {
    const parsed: unknown = JSON.parse(raw);
    if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed))
      throw new Error('not an object');
    body = parsed as GenerationRequest;
  } catch (err) {
    return sendError(res, 400, `Invalid JSON body: ${(err as Error).message}`);
  }
  state.parsedBody(body);

  let step: ScriptStep | undefined;
  try {
    step = scriptStepOf(req, body);
  } catch (err) {
    if (err instanceof BadRequest) return sendError(res, 400, err.message);
    throw err;
  }
  // A step's fault is for its own request, not for the continuation that resumes it.
  const stepFault =
    typeof step?.fault === 'string' && body.continue_final_message !== true ? step.fault : undefined;
  const faultHeader = stepFault ?? header(req, 'x-mock-fault');
  const model = typeof body.model === 'string' ? body.model : '';
  if (!settings.models.includes(model) && !settings.engine?.model.servesAdapter(model))
    return sendError(res, 404, `The model \`${model}\` does not exist.`);
  let faults: Faults;
  try {
    faults = faultHeader === undefined ? state.takeFaults(model) : parseFault(faultHeader);
  } catch (err) {
    if (err instanceof FaultSpecError) return sendError(res, 400, `x-mock-fault: ${err.message}`);
    throw err;
  }
  if (faults.resetHeaders) {
    req.socket.destroy();
    return;
  }
  if (faults.rejectPrefill && isContinuation(body)) {
    return send(
      res,
      400,
      // vLLM's words (transformers' apply_chat_template) for a template that drops the prefill.
      engineError(
        'continue_final_message is set but the final message does not appear in the chat after applying the chat template! This can happen if the chat template deletes portions of the final message. Please verify the chat template and final message in your chat to ensure they are compatible.',
        'BadRequestError',
        400,
      ),
    );
  }
  if (rankHeader !== undefined) {
    const rank = Number(rankHeader);
    if (!Number.isInteger(rank) || rank < 0 || rank >= settings.dpSize) {
      return sendError(res, 400, `data_parallel_rank ${rankHeader} is out of range [0, ${settings.dpSize}).`);
    }
  }
  let plan: Plan;
  try {
    plan = planOf(req, body, api, step, settings.defaultMaxTokens);
  } catch (err) {
    if (err instanceof BadRequest) return sendError(res, 400, err.message);
    throw err;
  }

  const { pacing, engine } = settings;
  let run: EngineRun | undefined;
  state.started();
  const life = new Life((how) => {
    state.ended(how);
    run?.ticket.abort();
  });
  res.on('close', () => {
    if (!res.writableFinished) life.end('aborted');
  });
  const then = (ms: number, step: () => void) => {
    if (ms > 0) pacing.clock.after(ms, () => !life.ended && step());
    else step();
  };

  then(faults.delayHeadersMs, () => {
    if (faults.status !== undefined) {
      life.end('completed');
      const status = faults.status;
      const retryAfter = faults.noRetryAfter
        ? undefined
        : (faults.retryAfter ?? (status === 429 ? 1 : undefined));
      const headers: Record<string, string> =
        retryAfter === undefined ? {} : { 'retry-after': String(retryAfter) };
      return send(res, status, refusalBody(faults, status), headers);
    }
    if (engine) {
      try {
        run = engine.submit(body, api, plan, model, header(req, 'x-mock-trace-id'));
      } catch (err) {
        if (!(err instanceof EngineRejected)) throw err;
        life.end('completed');
        return sendError(res, 400, err.message);
      }
    }
    const id = responseId(api);
    const created = Math.floor(Date.now() / 1000);
    if (body.stream === true) {
      const writer = new ChunkWriter(api, id, model, created, plan.choices);
      return new MockStream(res, life, pacing, writer, plan, faults, run).start();
    }
    if (faults.triggers.some((t) => t.kind === 'stall_after')) return; // a hung engine never answers
    // Like vLLM, a non-streaming answer comes when generation is done.
    const tokens = plan.usage.completion_tokens / plan.choices;
    const whenGenerated = (answer: () => void) =>
      run
        ? run.whenDone(() => then(faults.delayFirstMs, () => !life.ended && answer()))
        : then(faults.delayFirstMs + pacing.intervalMs * tokens, answer);
    whenGenerated(() => {
      const text = completeBody(api, id, model, created, resultsOf(plan), plan.usage);
      if (faults.triggers.some((t) => t.kind === 'drop_after')) {
        life.end('cut');
        res.writeHead(200, {
          'content-type': 'application/json',
          'content-length': String(Buffer.byteLength(text)),
        });
        res.write(text.slice(0, Math.floor(text.length / 2)));
        cutConnection(res);
        return;
      }
      life.end('completed');
      send(res, 200, text);
    });
  });
}

/** The choices of a non-streaming answer, all alike. */
function resultsOf(plan: Plan): ChoiceResult[] {
  const text = plan.tool ? '' : plan.completion.text();
  const reasoning = reasoningText(plan.reasoningTokens);
  return Array.from({ length: plan.choices }, (_, c) => ({
    text,
    reasoning,
    toolCall: plan.tool
      ? {
          id: plan.tool.callIds[c]!,
          name: plan.tool.name,
          arguments: plan.tool.argumentPieces ? plan.tool.argumentPieces.join('') : TOOL_ARGUMENTS,
        }
      : undefined,
    finishReason: plan.tool ? 'tool_calls' : plan.completion.finishReason,
  }));
}

/** Whether a request continues a final assistant message (a resume, a fallback's prefill). */
function isContinuation(body: { continue_final_message?: unknown; messages?: unknown }): boolean {
  if (body.continue_final_message === true) return true;
  const messages = body.messages;
  return Array.isArray(messages) && (messages.at(-1) as { role?: unknown } | undefined)?.role === 'assistant';
}

/** The body of an injected refusal: an engine's error, or what a context or policy refusal says. */
function refusalBody(faults: Faults, status: number): string {
  if (faults.refusal === 'context_length') {
    // vLLM's words (its 400 carries no stable code: the message is what tells it).
    return engineError(
      "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens (4990 in the messages, 10 in the completion). Please reduce the length of the messages or completion.",
      'BadRequestError',
      400,
    );
  }
  if (faults.refusal === 'content_policy') {
    return JSON.stringify({
      error: {
        message: 'Your request was rejected as a result of our safety system.',
        type: 'invalid_request_error',
        param: null,
        code: 'content_policy_violation',
      },
    });
  }
  return engineError(`injected HTTP ${status} (sluice mock)`, errorTypeOf(status), status);
}
