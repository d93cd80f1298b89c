import type { DispatchRequest } from '../../dispatch/dispatcher.js';
import type { ResumableStream } from '../../dispatch/resumable-stream.js';
import { isSluiceError } from '../../errors/base.js';
import { ClientDisconnected } from '../../errors/http-errors.js';
import { McpTurnFailed } from '../../errors/mcp-errors.js';
import { StreamError } from '../../errors/stream-errors.js';
import type { McpConnection } from '../../mcp/connection.js';
import { markMade } from '../provenance.js';
import type { ResponseBuilder, ToolCallRouter } from '../response-builder.js';
import type { ResponseRun, RunEnd } from '../response-run.js';
import { type ChatMessage, mcpResultText } from '../to-chat.js';
import type { ResponseUsage } from '../types.js';
import type { McpBounds } from './bounds.js';
import type { McpToolCaller } from './tool-call.js';
import type { McpToolNames } from './tool-names.js';
import type { TurnBodies } from './turn-body.js';

/** The `incomplete_details.reason` of a response whose tool loop reached `mcp.maxTurns`. */
export const MCP_MAX_TURNS = 'mcp_max_turns';

/** What the loop needs from the service: opening an engine stream for a turn. */
export interface LoopHost {
  /** The response's dispatch request (read at each turn: a background run replaces its signal). */
  dispatch(): DispatchRequest;
  /** Opens a turn's engine stream (resumable when resume is on); `body` is the turn's chat body. */
  open(dispatch: DispatchRequest, body: Record<string, unknown>): Promise<ResumableStream>;
}

/** What the loop needs of a response's MCP part (see McpSession). */
export interface ToolLoopParts {
  router: ToolCallRouter;
  /** Shows the tool lists and the approved calls, before the first turn's events. */
  prelude(builder: ResponseBuilder): void;
  names: McpToolNames;
  bounds: McpBounds;
  caller: McpToolCaller;
  bodies: TurnBodies;
}

/**
 * The tool loop: follows each engine turn into the same response (one event ladder, one
 * sequence), makes the MCP calls a turn asks for, feeds their results back and opens the next
 * turn, until the engine answers without calling an MCP tool, calls one of the request's own
 * functions, or asks for an approval. An engine failure in any turn ends the whole response;
 * an MCP server failure is an `mcp_call` with `error`, told to the engine. An engine that still
 * calls MCP tools in its last allowed turn (`maxTurns`) ends the response as incomplete
 * (`incomplete_details.reason` "mcp_max_turns"), the calls of that turn not made.
 */
export async function runToolLoop(
  parts: ToolLoopParts,
  run: ResponseRun,
  first: ResumableStream,
  host: LoopHost,
  messages: ChatMessage[],
): Promise<RunEnd> {
  const { names, bounds, caller, bodies } = parts;
  const builder = run.builder;
  builder.toolRouter = parts.router;
  parts.prelude(builder);
  const halt = run.haltSignal;
  const connections = new Map<string, McpConnection>();
  let stream = first;
  let usage: ResponseUsage | null = run.response.usage;
  try {
    for (;;) {
      const turnStart = run.response.output.length;
      const before = run.response.usage;
      const end = await run.follow(stream);
      if (run.response.usage !== before && run.response.usage) usage = addUsage(usage, run.response.usage);
      run.response.usage = usage;
      if (end.kind !== 'finished') return end;
      const reason = end.finishReason ?? stream.finishReason;
      const items = run.response.output.slice(turnStart);
      if (
        reason === 'length' ||
        reason === 'content_filter' ||
        !items.some((item) => item.type === 'mcp_call' && item.status === 'in_progress')
      )
        return end;
      const text = items
        .flatMap((item) => (item.type === 'message' ? item.content.map((part) => part.text) : []))
        .join('');
      const calls = builder.endTurn();
      const assistant: ChatMessage = {
        role: 'assistant',
        content: text === '' ? null : text,
        tool_calls: calls.map((call) => ({
          id: call.callId,
          type: 'function' as const,
          function: {
            name:
              call.item.type === 'function_call'
                ? call.item.name
                : (names.engineName(call.item.server_label, call.item.name) ?? call.item.name),
            arguments: call.item.arguments,
          },
        })),
      };
      // A call of the client's own function, or one waiting for approval, ends the turn and the response.
      const last = calls.some((call) => call.item.type !== 'mcp_call');
      // No turn is left to give the results to: the calls are not made (they end as incomplete).
      if (!last && bounds.turn + 1 >= bounds.maxTurns) return { kind: 'incomplete', reason: MCP_MAX_TURNS };
      const results: ChatMessage[] = [];
      for (const call of calls) {
        if (call.item.type !== 'mcp_call') continue;
        if (halt.aborted) break;
        const result = await caller.call(call.item, connections, halt);
        // A response ended meanwhile closes the call as incomplete.
        if (halt.aborted) break;
        builder.mcpCallDone(call.item.id, result);
        results.push({ role: 'tool', tool_call_id: call.callId, content: mcpResultText(result) });
      }
      if (halt.aborted) return haltEnd(run);
      if (last) return end;
      messages.push(assistant, ...results);
      const body = bodies.next(messages);
      const base = host.dispatch();
      const dispatch: DispatchRequest = {
        ...base,
        payload: JSON.stringify(body),
        requestId: `${base.requestId}-mcp${bounds.turn}`,
        signal: AbortSignal.any([base.signal, halt]),
      };
      try {
        stream = await host.open(dispatch, body);
      } catch (err) {
        if (halt.aborted) return haltEnd(run);
        return failedEnd(err);
      }
      if (halt.aborted) {
        stream.abandon(new ClientDisconnected());
        return haltEnd(run);
      }
    }
  } finally {
    builder.toolRouter = undefined;
    for (const connection of connections.values()) void connection.close();
    // Its approval requests can be answered by a later request (see checkApprovals).
    markMade(run.response.output);
  }
}

function addUsage(total: ResponseUsage | null, turn: ResponseUsage): ResponseUsage {
  if (!total) return turn;
  return {
    input_tokens: total.input_tokens + turn.input_tokens,
    input_tokens_details: {
      cached_tokens: total.input_tokens_details.cached_tokens + turn.input_tokens_details.cached_tokens,
    },
    output_tokens: total.output_tokens + turn.output_tokens,
    output_tokens_details: {
      reasoning_tokens:
        total.output_tokens_details.reasoning_tokens + turn.output_tokens_details.reasoning_tokens,
    },
    total_tokens: total.total_tokens + turn.total_tokens,
  };
}

function haltEnd(run: ResponseRun): RunEnd {
  if (run.haltSignal.reason === 'cancelled') return { kind: 'cancelled' };
  const error = new ClientDisconnected();
  return { kind: 'failed', code: error.code, message: error.message, error };
}

function failedEnd(err: unknown): RunEnd {
  const error =
    err instanceof StreamError
      ? err
      : new McpTurnFailed(
          isSluiceError(err) ? err.code : 'internal_error',
          err instanceof Error ? err.message : String(err),
        );
  return { kind: 'failed', code: error.code, message: error.message, error };
}
