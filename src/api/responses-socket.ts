import { randomBytes } from 'node:crypto';
import type { FastifyRequest } from 'fastify';
import type { RawData, WebSocket } from 'ws';
import type { SluiceError } from '../errors/base.js';
import { toSluiceError } from '../errors/from-thrown.js';
import { ClientDisconnected, GatewayShuttingDown } from '../errors/http-errors.js';
import { InvalidValue } from '../errors/request-errors.js';
import {
  ConnectionTimeLimitReached,
  InvalidMessage,
  PreviousResponseFailed,
  ResponseInProgress,
  StreamLimitReached,
} from '../errors/websocket-errors.js';
import { type ResponseChannel, responseCreate } from '../pipeline/run-response.js';
import type { ResolvedContext } from '../responses/context.js';
import type { CreateResponseRequest } from '../responses/request-schema.js';
import type { EventWriter } from '../responses/response-run.js';
import type { InputItem, OutputItem } from '../responses/types.js';
import { callerOf } from './caller.js';
import type { GatewayContext } from './context.js';
import {
  type EventSocket,
  HIGH_WATER_BYTES,
  LOW_WATER_BYTES,
  type SocketEventWriter,
  socketEventWriter,
  taggedWriter,
} from './socket-event-writer.js';
import { NO_HEADERS, parseEvent, rawBytes, refuseHttpOnlyFields, streamIdOf } from './socket-messages.js';

/** `WebSocket.OPEN` (the `ws` module is only imported for its types here). */
const OPEN = 1;
/** Failed responses of a connection remembered, so that continuing one is refused with its cause. */
const FAILED_KEPT = 64;

/** Close code and reason when a connection reaches its age limit (1001: going away; clients reconnect). */
export const CONNECTION_LIMIT_CLOSE = { code: 1001, reason: 'websocket_connection_limit_reached' } as const;

export interface ResponsesSocketOptions {
  maxConnectionMs: number;
  pingIntervalMs: number;
  cachedResponses: number;
  maxStreams: number;
  maxQueuedPerStream: number;
}

type ContextItem = InputItem | OutputItem;

/**
 * One stream of a connection: the responses of one `stream_id`, run one after another in the
 * order their `response.create` messages came, or the connection's default stream (no
 * `stream_id`), which runs one response and refuses a create while it does.
 */
interface Lane {
  readonly streamId: string | undefined;
  /** Sees the lane's events: the connection's writer, each event tagged with the `stream_id`. */
  readonly writer: EventWriter;
  /** Creates waiting behind the one that runs, each with the size of its message. */
  readonly queue: { event: Record<string, unknown>; bytes: number }[];
  /** Aborts the response that runs. */
  controller: AbortController | undefined;
}

/**
 * One WebSocket connection on `/v1/responses` (the Open Responses `x-openresponses-websocket`
 * extension): each `response.create` message runs one response through the same machinery as
 * an SSE stream (same events, same terminal rule, same storage and metrics), its events sent as
 * JSON text messages. One response at a time per stream: creates with a `stream_id` (OpenAI's
 * WebSocket multiplexing) run at once across stream ids and in order within one, their events
 * and errors tagged with it; without one, a create while the default stream runs is refused.
 * `previous_response_id` continues from the connection's own responses (kept in memory,
 * `store: false` ones too) or from the store; errors are `{"type":"error","status":N,"error":{...}}`
 * messages. The connection is pinged, and ends after `maxConnectionMs`.
 */
export class ResponsesSocket {
  /** The streams running a response, by `stream_id` (`''` for the default stream). */
  private readonly lanes = new Map<string, Lane>();
  /**
   * Bytes of the messages waiting on the connection's streams, bounded by one message's limit
   * (`server.bodyLimitBytes`): a client cannot make the gateway hold streams × queue × limit.
   */
  private queuedBytes = 0;
  private expired = false;
  private draining = false;
  private closed = false;
  /** The payload of the last ping; only a pong carrying it shows the peer alive. */
  private pingPayload: Buffer | undefined;
  private alive = true;
  /** Whether reading the client's messages is paused, until the replies queued drain. */
  private readPaused = false;
  private count = 0;
  /** The whole context after each completed (or incomplete) response of this connection, oldest first. */
  private readonly cache = new Map<string, ContextItem[]>();
  private readonly failed = new Set<string>();
  private readonly writer: SocketEventWriter;
  private pinger: NodeJS.Timeout | undefined;
  private limit: NodeJS.Timeout | undefined;
  private readonly createResponse: (channel: ResponseChannel) => Promise<void>;

  constructor(
    private readonly ctx: GatewayContext,
    private readonly socket: WebSocket,
    private readonly request: FastifyRequest,
    private readonly options: ResponsesSocketOptions,
  ) {
    // Every message to the client (events and errors) goes through send(): its backpressure.
    const outbound: EventSocket = {
      get readyState() {
        return socket.readyState;
      },
      get bufferedAmount() {
        return socket.bufferedAmount;
      },
      send: (data, callback) => this.send(data, callback),
    };
    this.writer = socketEventWriter(outbound);
    this.createResponse = responseCreate(ctx);
  }

  /**
   * Sends a message. Past `HIGH_WATER_BYTES` queued (the client does not read its replies), the
   * client's messages are no longer read (its socket is paused), so that a client sending faster
   * than it reads makes the gateway hold at most that much of its replies; reading resumes once
   * they have drained below `LOW_WATER_BYTES`.
   */
  private send(data: string, callback?: (err?: Error) => void): void {
    const socket = this.socket;
    if (socket.readyState !== OPEN) return;
    socket.send(data, (err) => {
      callback?.(err);
      if (this.readPaused && (socket.readyState !== OPEN || socket.bufferedAmount < LOW_WATER_BYTES)) {
        this.readPaused = false;
        socket.resume();
      }
    });
    if (!this.readPaused && socket.bufferedAmount >= HIGH_WATER_BYTES) {
      this.readPaused = true;
      socket.pause();
    }
  }

  start(): void {
    const socket = this.socket;
    socket.on('message', (data: RawData, isBinary: boolean) => this.onMessage(data, isBinary));
    // Only the answer to the gateway's own ping counts: a pong echoes its ping's payload, and an
    // unsolicited one (which a peer may send at any time) shows nothing.
    socket.on('pong', (data: Buffer) => {
      if (this.pingPayload?.equals(data)) this.alive = true;
    });
    socket.on('close', () => this.onClose());
    this.pinger = setInterval(() => {
      if (!this.alive) {
        // No pong since the last ping: the peer is gone (its response, if any, is aborted on close).
        this.ctx.log.info({ requestId: this.request.id }, 'websocket peer did not answer a ping: closing');
        socket.terminate();
        return;
      }
      this.alive = false;
      this.pingPayload = randomBytes(8);
      socket.ping(this.pingPayload);
    }, this.options.pingIntervalMs);
    this.pinger.unref();
    this.limit = setTimeout(() => this.expire(), this.options.maxConnectionMs);
    this.limit.unref();
  }

  private get busy(): boolean {
    return this.lanes.size > 0;
  }

  private onMessage(data: RawData, isBinary: boolean): void {
    if (this.closed) return;
    if (this.expired) {
      // The connection ends once the responses in flight have: nothing new starts.
      if (this.busy) this.sendError(this.limitError());
      else this.endForLimit();
      return;
    }
    let event: Record<string, unknown>;
    let streamId: string | undefined;
    let lane: Lane | undefined;
    const message = rawBytes(data);
    const bytes = message.length;
    try {
      if (isBinary) {
        throw new InvalidMessage(
          'Binary messages are not supported: send each event as a JSON text message.',
        );
      }
      event = parseEvent(message.toString('utf8'));
      streamId = streamIdOf(event);
      lane = this.lanes.get(streamId ?? '');
      if (lane && streamId === undefined) {
        throw new ResponseInProgress();
      }
      if (this.ctx.lifecycle.draining) throw new GatewayShuttingDown();
      if (lane && lane.queue.length >= this.options.maxQueuedPerStream) {
        throw new StreamLimitReached(
          `Stream '${streamId}' already has ${this.options.maxQueuedPerStream} response.create messages waiting: send more once some have ended.`,
          'stream_queue_full',
        );
      }
      const limit = this.ctx.config.server.bodyLimitBytes;
      if (lane && this.queuedBytes + bytes > limit) {
        throw new StreamLimitReached(
          `The response.create messages waiting on this connection's streams would exceed ${limit} bytes: send more once some have started.`,
          'stream_queue_full',
        );
      }
      if (!lane && this.lanes.size >= this.options.maxStreams) {
        throw new StreamLimitReached(
          `This connection already runs ${this.options.maxStreams} streams at once: wait for one to end, or send this response.create on a stream_id that is running (it waits its turn there).`,
          'too_many_streams',
        );
      }
    } catch (err) {
      this.sendError(toSluiceError(err, this.ctx.config.server.bodyLimitBytes), streamId);
      return;
    }
    if (lane) {
      lane.queue.push({ event, bytes });
      this.queuedBytes += bytes;
      return;
    }
    lane = {
      streamId,
      writer: streamId === undefined ? this.writer : taggedWriter(this.writer, streamId),
      queue: [],
      controller: undefined,
    };
    this.lanes.set(streamId ?? '', lane);
    this.runLane(lane, event);
  }

  /** Runs `event` on its lane, then the lane's next create, until the lane is empty. */
  private runLane(lane: Lane, event: Record<string, unknown>): void {
    void this.create(event, lane).finally(() => {
      lane.controller = undefined;
      const ending = this.closed || this.expired || this.draining;
      const next = ending ? undefined : lane.queue.shift();
      if (next !== undefined) {
        this.queuedBytes -= next.bytes;
        this.runLane(lane, next.event);
        return;
      }
      // The connection is ending: what still waited on the lane is refused, each with its cause.
      if (lane.queue.length > 0 && !this.closed) {
        const error = this.expired ? this.limitError() : new GatewayShuttingDown();
        for (const waiting of lane.queue) {
          this.queuedBytes -= waiting.bytes;
          this.sendError(error, lane.streamId);
        }
      }
      lane.queue.length = 0;
      this.lanes.delete(lane.streamId ?? '');
      if (this.busy) return;
      if (this.expired) this.endForLimit();
      else if (this.draining) this.drain();
    });
  }

  /** Runs one `response.create` to its terminal event (or to an error message): the WebSocket channel of the Responses pipeline. */
  private async create(event: Record<string, unknown>, lane: Lane): Promise<void> {
    const { type: _type, stream_id: _streamId, ...body } = event;
    const previous = typeof body.previous_response_id === 'string' ? body.previous_response_id : undefined;
    const controller = new AbortController();
    lane.controller = controller;
    await this.createResponse({
      requestId: `${this.request.id}-${++this.count}`,
      headers: this.request.headers,
      body,
      elapsedMs: 0,
      signal: controller.signal,
      answering: NO_HEADERS,
      streams: () => true,
      refuse: refuseHttpOnlyFields,
      caller: callerOf(this.request),
      context: (request) => this.contextOf(request),
      events: () => lane.writer,
      answer: () => {},
      watch: async () => false,
      // Its engine request is aborted already; nothing is left to answer on a closed socket.
      gone: () => {},
      fail: (error) => {
        // A continuation that fails evicts what it continued from (Open Responses WebSocket rules).
        if (previous) this.cache.delete(previous);
        this.sendError(error, lane.streamId);
      },
      ended: (prepared, terminal) => {
        const id = prepared.response.id;
        if (terminal.status === 'completed' || terminal.status === 'incomplete') {
          this.remember(id, [...prepared.history, ...prepared.input, ...prepared.response.output]);
        } else {
          this.rememberFailed(id);
          if (previous) this.cache.delete(previous);
        }
      },
    });
  }

  /**
   * What a request continues from when this connection holds it (its own responses); undefined
   * sends the pipeline to the store.
   */
  private async contextOf(request: CreateResponseRequest): Promise<ResolvedContext | undefined> {
    const previous = request.previous_response_id;
    if (previous && this.failed.has(previous)) {
      throw new PreviousResponseFailed(previous);
    }
    const cached = previous ? this.cache.get(previous) : undefined;
    if (!previous || !cached) return undefined;
    if (request.conversation) {
      throw new InvalidValue(
        'previous_response_id and conversation cannot be used together.',
        'previous_response_id',
      );
    }
    // The most recently used entries are kept longest.
    this.cache.delete(previous);
    this.cache.set(previous, cached);
    return { history: cached, previousResponseId: previous, conversationId: null };
  }

  private remember(id: string, items: ContextItem[]): void {
    this.cache.set(id, items);
    while (this.cache.size > this.options.cachedResponses) {
      const oldest = this.cache.keys().next().value as string;
      this.cache.delete(oldest);
    }
  }

  private rememberFailed(id: string): void {
    this.failed.add(id);
    if (this.failed.size > FAILED_KEPT) this.failed.delete(this.failed.values().next().value as string);
  }

  /** An error message; one about a create sent with a `stream_id` carries it, as its events do. */
  private sendError(error: SluiceError, streamId?: string): void {
    if (this.socket.readyState !== OPEN) return;
    const body = error.toBody().error;
    const message: Record<string, unknown> = {
      type: 'error',
      status: error.status,
      error: { ...body, code: body.code ?? error.code },
    };
    if (streamId !== undefined) message.stream_id = streamId;
    this.send(JSON.stringify(message));
  }

  /** The gateway is shutting down: close now when idle, else right after the responses in flight end. */
  drain(): void {
    this.draining = true;
    if (this.busy || this.closed) return;
    this.closed = true;
    this.socket.close(1001, 'gateway shutting down');
  }

  /** Called once the connection has closed. */
  onClosed: (() => void) | undefined;

  private expire(): void {
    this.expired = true;
    // A response in flight ends first; the connection closes right after its terminal event.
    if (!this.busy) this.endForLimit();
  }

  private limitError(): ConnectionTimeLimitReached {
    const minutes = Math.round((this.options.maxConnectionMs / 60_000) * 100) / 100;
    return new ConnectionTimeLimitReached(minutes);
  }

  private endForLimit(): void {
    if (this.closed || this.socket.readyState !== OPEN) return;
    this.sendError(this.limitError());
    this.socket.close(CONNECTION_LIMIT_CLOSE.code, CONNECTION_LIMIT_CLOSE.reason);
    this.closed = true;
  }

  private onClose(): void {
    this.closed = true;
    clearInterval(this.pinger);
    clearTimeout(this.limit);
    this.cache.clear();
    // A client that goes away aborts its responses' engine requests, as on SSE; what waited never starts.
    for (const lane of this.lanes.values()) {
      lane.queue.length = 0;
      lane.controller?.abort(new ClientDisconnected());
    }
    this.queuedBytes = 0;
    this.writer.release();
    this.onClosed?.();
  }
}
