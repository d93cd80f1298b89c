import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import OpenAI from 'openai';
import { ResponsesWS } from 'openai/resources/responses/ws';
import { describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import {
  type EventSocket,
  HIGH_WATER_BYTES,
  LOW_WATER_BYTES,
  socketEventWriter,
} from '../src/api/socket-event-writer.js';
import type { Gateway } from '../src/gateway.js';
import { sequence } from '../src/mock/generate.js';
import { eventually, metric, metricOrZero, perTest, post } from './helpers/gateway.js';

const TERMINAL = new Set(['response.completed', 'response.incomplete', 'response.failed']);

interface Message {
  type: string;
  sequence_number?: number;
  status?: number;
  error?: { code: string; message: string; type?: string };
  response?: {
    id: string;
    status: string;
    error: { code: string } | null;
    output: { type: string; status: string; content?: { text: string }[] }[];
  };
  [key: string]: unknown;
}

/** A raw `ws` client of the gateway's /v1/responses, collecting every text message as sent. */
class Client {
  readonly texts: string[] = [];
  readonly messages: Message[] = [];
  private waiters: (() => void)[] = [];
  closed: { code: number; reason: string } | undefined;

  private constructor(readonly ws: WebSocket) {
    ws.on('message', (data) => {
      this.texts.push(String(data));
      this.messages.push(JSON.parse(String(data)) as Message);
      for (const wake of this.waiters.splice(0)) wake();
    });
    ws.on('close', (code, reason) => {
      this.closed = { code, reason: String(reason) };
      for (const wake of this.waiters.splice(0)) wake();
    });
  }

  static open(gateway: Gateway, headers: Record<string, string> = {}, options: WebSocket.ClientOptions = {}) {
    const ws = new WebSocket(`${gateway.url.replace('http', 'ws')}/v1/responses`, { headers, ...options });
    return new Promise<Client>((resolve, reject) => {
      const client = new Client(ws);
      ws.once('open', () => resolve(client));
      ws.once('unexpected-response', (_req, res) => reject(new Error(`upgrade refused: ${res.statusCode}`)));
      ws.once('error', reject);
    });
  }

  send(event: Record<string, unknown>): void {
    this.ws.send(JSON.stringify({ type: 'response.create', ...event }));
  }

  /** Waits until `count` messages have arrived in all (or the socket closed). */
  async until(check: (messages: Message[]) => boolean, ms = 5_000): Promise<Message[]> {
    const end = Date.now() + ms;
    while (!check(this.messages)) {
      if (this.closed) throw new Error(`closed (${this.closed.code} ${this.closed.reason})`);
      if (Date.now() > end) throw new Error(`timed out; got ${this.texts.length} messages`);
      await new Promise<void>((resolve) => {
        this.waiters.push(resolve);
        setTimeout(resolve, 100);
      });
    }
    return this.messages;
  }

  /** Sends a create and returns the messages it produced, up to its terminal event or error. */
  async turn(event: Record<string, unknown>): Promise<{ messages: Message[]; texts: string[] }> {
    const start = this.texts.length;
    this.send(event);
    await this.until((all) => all.slice(start).some((m) => TERMINAL.has(m.type) || m.type === 'error'));
    const texts = this.texts.slice(start);
    return { messages: texts.map((t) => JSON.parse(t) as Message), texts };
  }

  close(): void {
    this.ws.close();
  }
}

/** The exact JSON text of the `response` inside a terminal event's text. */
const responseText = (text: string) => text.slice(text.indexOf('"response":') + 11, -1);

/** An event with its generated ids and clock readings replaced, to compare two runs. */
function shape(text: string): unknown {
  return JSON.parse(
    text
      .replace(/"(resp|msg|rs|fc|call)_[A-Za-z0-9]+"/g, '"$1_X"')
      .replace(/"(created_at|completed_at)":\d+/g, '"$1":0'),
  );
}

function sseEvents(text: string): string[] {
  return text
    .split('\n\n')
    .filter((b) => b.trim())
    .map((b) => /^data: (.*)$/m.exec(b)![1]!);
}

describe('Responses API over WebSocket', () => {
  const fx = perTest();

  async function setup(config: Record<string, unknown> = {}, tokensPerSecond = 0) {
    const workers = await fx.mocks(1, { tokensPerSecond });
    const gateway = await fx.gateway({ workers: [{ url: workers[0]!.url }], ...config });
    return { worker: workers[0]!, gateway };
  }

  it('sends exactly the events SSE sends for the same request, and GET still serves stored ones', async () => {
    const { gateway } = await setup();
    const body = { model: 'mock-model', input: 'hello', instructions: 'be brief', max_output_tokens: 8 };
    const sse = await post(`${gateway.url}/v1/responses`, { ...body, stream: true });
    const client = await Client.open(gateway);
    const { texts } = await client.turn(body);
    expect(texts.map(shape)).toEqual(sseEvents(sse.text).map(shape));
    const last = JSON.parse(texts.at(-1)!) as Message;
    expect(last.type).toBe('response.incomplete');
    // The GET routes beside the WebSocket one are untouched; stored == sent.
    const stored = await fetch(`${gateway.url}/v1/responses/${last.response!.id}`);
    expect(await stored.text()).toBe(responseText(texts.at(-1)!));
    // A plain GET on the WebSocket path (no upgrade) is a 404.
    expect((await fetch(`${gateway.url}/v1/responses`)).status).toBe(404);
    client.close();
  });

  it("works with the openai SDK's ResponsesWS client", async () => {
    const { gateway } = await setup();
    const openai = new OpenAI({ baseURL: `${gateway.url}/v1`, apiKey: 'x', maxRetries: 0 });
    const rws = new ResponsesWS(openai);
    const types: string[] = [];
    const done = new Promise<OpenAI.Responses.Response>((resolve, reject) => {
      rws.on('error', reject);
      rws.on('event', (event) => {
        types.push(event.type);
        if (event.type === 'response.completed') resolve(event.response);
      });
    });
    rws.send({ type: 'response.create', model: 'mock-model', input: 'sdk' });
    const response = await done;
    expect(
      response.output_text ?? (response.output[0] as { content: { text: string }[] }).content[0]!.text,
    ).toBe(sequence(16));
    expect(types[0]).toBe('response.created');
    expect(types.at(-1)).toBe('response.completed');
    rws.close();
  });

  it('allows one response in flight per connection; a second create meanwhile is an error message', async () => {
    const { gateway } = await setup({}, 100);
    const client = await Client.open(gateway);
    client.send({ model: 'mock-model', input: 'first', max_output_tokens: 10 });
    await client.until((all) => all.length > 0);
    client.send({ model: 'mock-model', input: 'second' });
    const all = await client.until((m) => m.some((e) => TERMINAL.has(e.type)));
    const errors = all.filter((m) => m.type === 'error');
    expect(errors).toEqual([
      { type: 'error', status: 409, error: expect.objectContaining({ code: 'response_in_progress' }) },
    ]);
    const terminals = all.filter((m) => TERMINAL.has(m.type));
    expect(terminals).toHaveLength(1);
    expect(terminals[0]!.type).toBe('response.incomplete');
    // Sequence numbers of the one response are unbroken.
    const numbers = all.filter((m) => m.type !== 'error').map((m) => m.sequence_number);
    expect(numbers).toEqual(numbers.map((_, i) => i));
    // Once it has ended the connection takes the next one.
    const next = await client.turn({ model: 'mock-model', input: 'third' });
    expect(next.messages.at(-1)!.type).toBe('response.completed');
    client.close();
  });

  it('runs one response per stream_id at once, in order within a stream_id, every event and error tagged', async () => {
    const { worker, gateway } = await setup({}, 100);
    const client = await Client.open(gateway);
    client.send({ stream_id: 'a', model: 'mock-model', input: 'a1', max_output_tokens: 5 });
    client.send({ stream_id: 'b', model: 'mock-model', input: 'b1', max_output_tokens: 5 });
    client.send({ stream_id: 'a', model: 'mock-model', input: 'a2', max_output_tokens: 5 });
    client.send({ model: 'mock-model', input: 'plain', max_output_tokens: 5 });
    // Waits its turn behind b1, then fails validation: the error names its stream.
    client.send({ stream_id: 'b', input: 'no model' });
    const all = await client.until(
      (m) => m.filter((e) => TERMINAL.has(e.type)).length === 4 && m.some((e) => e.type === 'error'),
      10_000,
    );
    const errors = all.filter((m) => m.type === 'error');
    expect(errors).toEqual([
      {
        type: 'error',
        status: 400,
        stream_id: 'b',
        error: expect.objectContaining({ code: 'missing_required_parameter', param: 'model' }),
      },
    ]);
    const events = all.filter((m) => m.type !== 'error');
    const of = (id: string | undefined) => events.filter((m) => m.stream_id === id);
    // Every event carries its create's stream_id; the default stream's carry none.
    expect(of('a').length + of('b').length + of(undefined).length).toBe(events.length);
    // Each response's sequence numbers are its own and unbroken; a2 starts after a1's terminal.
    const responses = (lane: Message[]) => {
      const runs: Message[][] = [];
      for (const m of lane) {
        if (m.type === 'response.created') runs.push([]);
        runs.at(-1)!.push(m);
      }
      return runs;
    };
    const runs = [...responses(of('a')), ...responses(of('b')), ...responses(of(undefined))];
    expect(runs.map((r) => r.length > 0 && TERMINAL.has(r.at(-1)!.type))).toEqual([true, true, true, true]);
    for (const run of runs) expect(run.map((m) => m.sequence_number)).toEqual(run.map((_, i) => i));
    // The streams ran at the same time: b1 and the default stream's response were created
    // before a1 ended.
    const index = (m: Message) => all.indexOf(m);
    const [a1, a2] = responses(of('a'));
    expect(index(responses(of('b'))[0]![0]!)).toBeLessThan(index(a1!.at(-1)!));
    expect(index(responses(of(undefined))[0]![0]!)).toBeLessThan(index(a1!.at(-1)!));
    expect(index(a2![0]!)).toBeGreaterThan(index(a1!.at(-1)!));
    // What was stored is what was sent, without the WebSocket envelope's stream_id.
    const a2Text = client.texts[index(a2!.at(-1)!)]!;
    expect(a2Text.endsWith(',"stream_id":"a"}')).toBe(true);
    const id = a2!.at(-1)!.response!.id;
    const stored = await (await fetch(`${gateway.url}/v1/responses/${id}`)).text();
    expect(stored).toBe(responseText(a2Text.replace(/,"stream_id":"a"\}$/, '}')));
    expect(stored).not.toContain('stream_id');
    // The engine saw the four valid creates, and none of them carried stream_id.
    expect(worker.stats.requests).toBe(4);
    for (const body of worker.stats.lastBodies) expect(JSON.stringify(body)).not.toContain('stream_id');
    client.close();
  });

  it('bounds the streams of a connection and the creates waiting on one; a client gone aborts them all', async () => {
    const { worker, gateway } = await setup(
      { responses: { websocket: { maxStreams: 2, maxQueuedPerStream: 1 } } },
      50,
    );
    const client = await Client.open(gateway);
    const bad = await client.turn({ stream_id: 7, model: 'mock-model', input: 'x' });
    expect(bad.messages).toEqual([
      {
        type: 'error',
        status: 400,
        error: expect.objectContaining({ code: 'invalid_value', param: 'stream_id' }),
      },
    ]);
    const long = await client.turn({ stream_id: 'x'.repeat(257), model: 'mock-model', input: 'x' });
    expect(long.messages[0]).toMatchObject({ status: 400, error: { param: 'stream_id' } });
    client.send({ stream_id: 'a', model: 'mock-model', input: 'a1', max_output_tokens: 500 });
    client.send({ stream_id: 'b', model: 'mock-model', input: 'b1', max_output_tokens: 500 });
    client.send({ stream_id: 'c', model: 'mock-model', input: 'c1' });
    client.send({ model: 'mock-model', input: 'plain' });
    client.send({ stream_id: 'a', model: 'mock-model', input: 'a2' });
    client.send({ stream_id: 'a', model: 'mock-model', input: 'a3' });
    const all = await client.until(
      (m) =>
        m.filter((e) => e.type === 'error').length === 5 &&
        m.filter((e) => e.type === 'response.output_text.delta').length >= 4,
    );
    expect(all.filter((m) => m.type === 'error').slice(2)).toEqual([
      {
        type: 'error',
        status: 429,
        stream_id: 'c',
        error: expect.objectContaining({ code: 'too_many_streams' }),
      },
      { type: 'error', status: 429, error: expect.objectContaining({ code: 'too_many_streams' }) },
      {
        type: 'error',
        status: 429,
        stream_id: 'a',
        error: expect.objectContaining({ code: 'stream_queue_full' }),
      },
    ]);
    expect(worker.stats.inflight).toBe(2);
    // The client goes away with two responses running and one waiting: both engine requests
    // are aborted at once, and the waiting one never reaches an engine.
    client.ws.terminate();
    await eventually(() => worker.stats.aborted === 2 && worker.stats.inflight === 0);
    await eventually(
      async () =>
        (await metricOrZero(gateway.url, 'sluice_client_disconnects_total', { api: 'responses' })) === 2,
    );
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(worker.stats.requests).toBe(2);
  });

  it('bounds the bytes of the creates waiting on a connection by one message limit', async () => {
    const { worker, gateway } = await setup({ server: { bodyLimitBytes: 2048 } }, 50);
    const client = await Client.open(gateway);
    const big = 'x'.repeat(1200);
    client.send({ stream_id: 'a', model: 'mock-model', input: 'a1', max_output_tokens: 10 });
    client.send({ stream_id: 'a', model: 'mock-model', input: big, max_output_tokens: 20 });
    client.send({ stream_id: 'a', model: 'mock-model', input: big, max_output_tokens: 2 });
    // a2 has started: its bytes no longer count, so one more may wait behind it.
    await client.until((m) => m.filter((e) => e.type === 'response.created').length === 2);
    client.send({ stream_id: 'a', model: 'mock-model', input: big, max_output_tokens: 2 });
    const all = await client.until((m) => m.filter((e) => TERMINAL.has(e.type)).length === 3, 5_000);
    expect(all.filter((m) => m.type === 'error')).toEqual([
      {
        type: 'error',
        status: 429,
        stream_id: 'a',
        error: expect.objectContaining({ code: 'stream_queue_full' }),
      },
    ]);
    expect(all.filter((m) => TERMINAL.has(m.type)).map((m) => m.stream_id)).toEqual(['a', 'a', 'a']);
    expect(worker.stats.requests).toBe(3);
    client.close();
  });

  it('a stream_id may continue from a response of another stream (a fork)', async () => {
    const { worker, gateway } = await setup();
    const client = await Client.open(gateway);
    const first = await client.turn({ stream_id: 'a', model: 'mock-model', input: 'root', store: false });
    const id = first.messages.at(-1)!.response!.id;
    const fork = await client.turn({
      stream_id: 'b',
      model: 'mock-model',
      input: 'branch',
      previous_response_id: id,
      store: false,
    });
    expect(fork.messages.at(-1)).toMatchObject({ type: 'response.completed', stream_id: 'b' });
    const sent = JSON.stringify(worker.stats.lastBodies.at(-1));
    expect(sent).toContain('root');
    expect(sent).toContain('branch');
    client.close();
  });

  it('continues store:false responses from the connection, store:true ones from anywhere', async () => {
    const { worker, gateway } = await setup();
    const client = await Client.open(gateway);
    const first = await client.turn({ model: 'mock-model', input: 'remember 7', store: false });
    const firstId = first.messages.at(-1)!.response!.id;
    // Not stored: GET does not know it.
    expect((await fetch(`${gateway.url}/v1/responses/${firstId}`)).status).toBe(404);
    const second = await client.turn({
      model: 'mock-model',
      input: 'what number?',
      previous_response_id: firstId,
      store: false,
    });
    expect(second.messages.at(-1)!.type).toBe('response.completed');
    const secondId = second.messages.at(-1)!.response!.id;
    const messagesOf = () => (worker.stats.lastBodies.at(-1) as { messages: unknown[] }).messages;
    expect(messagesOf()).toEqual([
      { role: 'user', content: 'remember 7' },
      { role: 'assistant', content: sequence(16) },
      { role: 'user', content: 'what number?' },
    ]);
    // A chain of three, still from memory.
    await client.turn({ model: 'mock-model', input: 'again', previous_response_id: secondId, store: false });
    expect(messagesOf()).toHaveLength(5);
    // Another connection cannot see this connection's store:false responses.
    const other = await Client.open(gateway);
    const refused = await other.turn({ model: 'mock-model', input: 'x', previous_response_id: firstId });
    expect(refused.messages).toEqual([
      { type: 'error', status: 404, error: expect.objectContaining({ code: 'previous_response_not_found' }) },
    ]);
    // store:true: stored, and continued from another connection through the store.
    const stored = await client.turn({ model: 'mock-model', input: 'kept' });
    const storedId = stored.messages.at(-1)!.response!.id;
    const fromOther = await other.turn({
      model: 'mock-model',
      input: 'more',
      previous_response_id: storedId,
    });
    expect(fromOther.messages.at(-1)!.type).toBe('response.completed');
    expect(messagesOf()).toEqual([
      { role: 'user', content: 'kept' },
      { role: 'assistant', content: sequence(16) },
      { role: 'user', content: 'more' },
    ]);
    client.close();
    other.close();
  });

  it('an unknown continuation is a typed error; a failed continuation evicts what it continued from', async () => {
    const { gateway } = await setup();
    const client = await Client.open(gateway);
    const unknown = await client.turn({ model: 'mock-model', input: 'x', previous_response_id: 'resp_nope' });
    expect(unknown.messages).toEqual([
      {
        type: 'error',
        status: 404,
        error: expect.objectContaining({
          code: 'previous_response_not_found',
          param: 'previous_response_id',
        }),
      },
    ]);
    const first = await client.turn({ model: 'mock-model', input: 'a', store: false });
    const id = first.messages.at(-1)!.response!.id;
    const failed = await client.turn({
      model: 'no-such-model',
      input: 'b',
      previous_response_id: id,
      store: false,
    });
    expect(failed.messages[0]).toMatchObject({
      type: 'error',
      status: 404,
      error: { code: 'model_not_found' },
    });
    const evicted = await client.turn({
      model: 'mock-model',
      input: 'c',
      previous_response_id: id,
      store: false,
    });
    expect(evicted.messages[0]).toMatchObject({
      type: 'error',
      status: 404,
      error: { code: 'previous_response_not_found' },
    });
    // HTTP-only fields are refused, and the connection goes on.
    const streamed = await client.turn({ model: 'mock-model', input: 'd', stream: true });
    expect(streamed.messages[0]).toMatchObject({
      status: 400,
      error: { code: 'unsupported_parameter', param: 'stream' },
    });
    const bad = await client.turn({ model: 'mock-model' });
    expect(bad.messages[0]).toMatchObject({ type: 'error', status: 400, error: { param: 'input' } });
    client.ws.send('not json');
    await client.until((m) => m.at(-1)!.error?.code === 'invalid_json');
    client.ws.send(JSON.stringify({ type: 'session.update' }));
    await client.until((m) => m.at(-1)!.error?.code === 'unknown_event_type');
    client.close();
  });

  it('with API keys on, the upgrade needs a key (401 before the upgrade), and limits apply per response', async () => {
    const { gateway } = await setup();
    const created = await post(`${gateway.url}/admin/keys`, { name: 'ws', models: ['mock-model'] });
    const { key } = created.json() as { key: string };
    await expect(Client.open(gateway)).rejects.toThrow('upgrade refused: 401');
    await expect(Client.open(gateway, { authorization: 'Bearer sk-wrong' })).rejects.toThrow(
      'upgrade refused: 401',
    );
    const client = await Client.open(gateway, { authorization: `Bearer ${key}` });
    const ok = await client.turn({ model: 'mock-model', input: 'hi' });
    expect(ok.messages.at(-1)!.type).toBe('response.completed');
    const notAllowed = await client.turn({ model: 'other-model', input: 'hi' });
    expect(notAllowed.messages).toEqual([
      { type: 'error', status: 403, error: expect.objectContaining({ code: 'model_not_allowed' }) },
    ]);
    // The response belongs to the key: GET with it works, without it is refused.
    const id = ok.messages.at(-1)!.response!.id;
    expect((await fetch(`${gateway.url}/v1/responses/${id}`)).status).toBe(401);
    const read = await fetch(`${gateway.url}/v1/responses/${id}`, {
      headers: { authorization: `Bearer ${key}` },
    });
    expect(await read.text()).toBe(responseText(ok.texts.at(-1)!));
    client.close();
  });

  it('a mid-stream engine fault ends in response.failed, items incomplete, stored == sent, counted', async () => {
    const { worker, gateway } = await setup({}, 200);
    const client = await Client.open(gateway, { 'x-mock-fault': 'reset_after:3' });
    const { texts, messages } = await client.turn({ model: 'mock-model', input: 'x', max_output_tokens: 50 });
    const last = messages.at(-1)!;
    expect(last.type).toBe('response.failed');
    expect(last.response!.status).toBe('failed');
    expect(last.response!.error!.code).toBe('request_stream_closed');
    expect(last.response!.output[0]!.status).toBe('incomplete');
    expect(last.response!.output[0]!.content![0]!.text).toBe(sequence(3));
    const doneItem = messages.find((m) => m.type === 'response.output_item.done') as unknown as {
      item: { status: string };
    };
    expect(doneItem.item.status).toBe('incomplete');
    const stored = await (await fetch(`${gateway.url}/v1/responses/${last.response!.id}`)).text();
    expect(stored).toBe(responseText(texts.at(-1)!));
    expect(
      await metric(gateway.url, 'sluice_stream_failures_total', {
        api: 'responses',
        reason: 'upstream_closed',
      }),
    ).toBe(1);
    expect(worker.stats.lastHeaders.at(-1)!['x-mock-fault']).toBe('reset_after:3');
    // Continuing a failed response is refused with its cause.
    const again = await client.turn({
      model: 'mock-model',
      input: 'y',
      previous_response_id: last.response!.id,
    });
    expect(again.messages[0]).toMatchObject({ status: 400, error: { code: 'previous_response_failed' } });
    client.close();
  });

  it('mid-stream resume works as on SSE (X-Sluice-Resume on the upgrade request)', async () => {
    const workers = await fx.mocks(2, { tokensPerSecond: 0 });
    workers[0]!.setFault('reset_after:3');
    const gateway = await fx.gateway({
      workers: workers.map((w, i) => ({ url: w.url, id: `w${i}` })),
      routing: { policy: 'round_robin' },
    });
    const client = await Client.open(gateway, { 'x-sluice-resume': 'on' });
    let last: Message | undefined;
    let resumed = 0;
    // Round robin: whichever turn lands on w0 breaks there and is resumed on w1.
    for (let i = 0; i < 2; i++) {
      const { messages, texts } = await client.turn({
        model: 'mock-model',
        input: 'x',
        max_output_tokens: 10,
      });
      last = messages.at(-1)!;
      expect(last.type).toBe('response.incomplete');
      expect(last.response!.output[0]!.content![0]!.text).toBe(sequence(10));
      const stored = await (await fetch(`${gateway.url}/v1/responses/${last.response!.id}`)).text();
      expect(stored).toBe(responseText(texts.at(-1)!));
      const metadata = (last.response as unknown as { metadata: Record<string, string> }).metadata;
      if (metadata.sluice_resumes === '1') resumed++;
    }
    expect(resumed).toBeGreaterThanOrEqual(1);
    expect(workers[0]!.stats.requests).toBe(resumed);
    client.close();
  });

  it('a client that closes mid-stream aborts the engine, counted as a client disconnect', async () => {
    const { worker, gateway } = await setup({}, 50);
    const client = await Client.open(gateway);
    client.send({ model: 'mock-model', input: 'x', max_output_tokens: 500 });
    const [created] = await client.until((m) => m.some((e) => e.type === 'response.output_text.delta'));
    client.ws.terminate();
    await eventually(() => worker.stats.aborted === 1 && worker.stats.inflight === 0);
    await eventually(
      async () =>
        (await metricOrZero(gateway.url, 'sluice_client_disconnects_total', { api: 'responses' })) === 1,
    );
    const id = created!.response!.id;
    await eventually(async () => (await fetch(`${gateway.url}/v1/responses/${id}`)).status === 200);
    const stored = (await (await fetch(`${gateway.url}/v1/responses/${id}`)).json()) as Message['response'];
    expect(stored!.status).toBe('failed');
    expect(stored!.error!.code).toBe('client_disconnected');
    expect(await metricOrZero(gateway.url, 'sluice_stream_failures_total', { api: 'responses' })).toBe(0);
  });

  it('ends a connection at its configured age limit with a typed error and close 1001', async () => {
    const { gateway } = await setup({ responses: { websocket: { maxConnectionMs: 300 } } });
    const client = await Client.open(gateway);
    const ok = await client.turn({ model: 'mock-model', input: 'quick' });
    expect(ok.messages.at(-1)!.type).toBe('response.completed');
    await eventually(() => client.closed !== undefined, 2_000);
    expect(client.messages.at(-1)).toMatchObject({
      type: 'error',
      status: 400,
      error: { code: 'websocket_connection_limit_reached' },
    });
    expect(client.closed).toEqual({ code: 1001, reason: 'websocket_connection_limit_reached' });
  });

  it('answers pings, pings the client, and closes a peer that does not answer', async () => {
    const { gateway } = await setup({ responses: { websocket: { pingIntervalMs: 100 } } });
    const live = await Client.open(gateway);
    let pings = 0;
    live.ws.on('ping', () => pings++);
    const pong = new Promise<void>((resolve) => live.ws.once('pong', () => resolve()));
    live.ws.ping();
    await pong;
    const dead = await Client.open(gateway, {}, { autoPong: false });
    await eventually(() => dead.closed !== undefined, 2_000);
    expect(dead.closed!.code).toBe(1006);
    expect(pings).toBeGreaterThan(1);
    expect(live.closed).toBeUndefined();
    live.close();
  });
});

describe('Responses WebSocket connections and the gateway lifecycle', () => {
  const fx = perTest();

  it('a graceful shutdown lets the response in flight finish, refuses new ones, then closes with 1001', async () => {
    const workers = await fx.mocks(1, { tokensPerSecond: 100 });
    const gateway = await fx.gateway({ workers: [{ url: workers[0]!.url }] });
    const busy = await Client.open(gateway);
    const idle = await Client.open(gateway);
    busy.send({ model: 'mock-model', input: 'x', max_output_tokens: 20 });
    await busy.until((m) => m.length > 2);
    const stopping = gateway.shutdown(5_000);
    // An idle connection is closed (1001) within 100 ms; a create it sends meanwhile is refused (503).
    idle.send({ model: 'mock-model', input: 'y' });
    await stopping;
    expect(busy.messages.filter((m) => TERMINAL.has(m.type)).map((m) => m.type)).toEqual([
      'response.incomplete',
    ]);
    await eventually(() => busy.closed !== undefined && idle.closed !== undefined);
    expect(idle.closed).toEqual({ code: 1001, reason: 'gateway shutting down' });
    // The create it sent (on loopback, long before the 100 ms check closes it) was answered, not
    // dropped: one 503, and it never reached the engine.
    expect(idle.messages).toEqual([
      { type: 'error', status: 503, error: expect.objectContaining({ code: 'gateway_shutting_down' }) },
    ]);
    expect(workers[0]!.stats.requests).toBe(1);
    expect(busy.closed).toEqual({ code: 1001, reason: 'gateway shutting down' });
  });

  it('a graceful shutdown lets every stream finish its running response, refuses what waited, then closes', async () => {
    const workers = await fx.mocks(1, { tokensPerSecond: 100 });
    const gateway = await fx.gateway({ workers: [{ url: workers[0]!.url }] });
    const client = await Client.open(gateway);
    client.send({ stream_id: 'a', model: 'mock-model', input: 'a1', max_output_tokens: 20 });
    client.send({ stream_id: 'b', model: 'mock-model', input: 'b1', max_output_tokens: 20 });
    client.send({ stream_id: 'a', model: 'mock-model', input: 'a2', max_output_tokens: 20 });
    await client.until((m) => m.filter((e) => e.type === 'response.output_text.delta').length >= 2);
    await gateway.shutdown(5_000);
    await eventually(() => client.closed !== undefined);
    const terminals = client.messages.filter((m) => TERMINAL.has(m.type));
    expect(terminals.map((m) => [m.stream_id, m.type]).sort()).toEqual([
      ['a', 'response.incomplete'],
      ['b', 'response.incomplete'],
    ]);
    expect(client.messages.filter((m) => m.type === 'error')).toEqual([
      {
        type: 'error',
        status: 503,
        stream_id: 'a',
        error: expect.objectContaining({ code: 'gateway_shutting_down' }),
      },
    ]);
    expect(client.closed).toEqual({ code: 1001, reason: 'gateway shutting down' });
    expect(workers[0]!.stats.requests).toBe(2);
  });

  it('a client that stops reading for a while still gets every event, in order', async () => {
    const workers = await fx.mocks(1, { tokensPerSecond: 0 });
    const gateway = await fx.gateway({ workers: [{ url: workers[0]!.url }], timeouts: { idleMs: 10_000 } });
    const client = await Client.open(gateway);
    const raw = (client.ws as unknown as { _socket: import('node:net').Socket })._socket;
    client.send({ model: 'mock-model', input: 'x', max_output_tokens: 20_000 });
    await client.until((m) => m.length > 0);
    raw.pause();
    // (Loopback kernel buffers may absorb this whole answer: the engine pausing is checked below.)
    await new Promise((resolve) => setTimeout(resolve, 1_000));
    raw.resume();
    const all = await client.until((m) => TERMINAL.has(m.at(-1)!.type), 30_000);
    expect(all.every((m, i) => m.sequence_number === i)).toBe(true);
    const last = all.at(-1)!;
    expect(last.type).toBe('response.incomplete');
    expect(last.response!.output[0]!.content![0]!.text).toBe(sequence(20_000));
    client.close();
  }, 40_000);
});

describe('the WebSocket event writer', () => {
  it('answers false past the high-water mark and resumes the engine once flushed below the low one', () => {
    const flushed: (() => void)[] = [];
    const socket = { readyState: 1, bufferedAmount: 0, sent: [] as string[] };
    const fake: EventSocket = {
      get readyState() {
        return socket.readyState as 1;
      },
      get bufferedAmount() {
        return socket.bufferedAmount;
      },
      send(data, callback) {
        socket.sent.push(data);
        socket.bufferedAmount += data.length;
        flushed.push(() => {
          socket.bufferedAmount -= data.length;
          callback();
        });
      },
    };
    const writer = socketEventWriter(fake);
    const chunk = 'x'.repeat(32 * 1024);
    let writes = 0;
    while (writer.write(chunk, 'response.output_text.delta')) writes++;
    expect(writes).toBe(HIGH_WATER_BYTES / chunk.length - 1);
    let resumed = 0;
    writer.onDrain(() => resumed++);
    // Flushing down to the low-water mark is not enough; below it the engine resumes, once.
    while (socket.bufferedAmount - chunk.length >= LOW_WATER_BYTES) flushed.shift()!();
    expect(resumed).toBe(0);
    flushed.shift()!();
    expect(resumed).toBe(1);
    for (const flush of flushed.splice(0)) flush();
    expect(resumed).toBe(1);
    // A closed socket never holds the engine: writes are dropped, waiters released.
    writer.onDrain(() => resumed++);
    expect(resumed).toBe(2);
    socket.readyState = 3;
    expect(writer.write(chunk, 'response.completed')).toBe(true);
    expect(socket.sent).toHaveLength(writes + 1);
    writer.onDrain(() => resumed++);
    expect(resumed).toBe(3);
  });
});

/** The garbage collector, for memory measured with nothing collectable left (V8's flag, in a new context). */
function collector(): () => void {
  setFlagsFromString('--expose-gc');
  return runInNewContext('gc') as () => void;
}

/** An upgrade the gateway answers over HTTP instead of 101: its status and JSON body. */
function refusedUpgrade(
  gateway: Gateway,
  headers: Record<string, string> = {},
): Promise<{ status: number; body: Message }> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(`${gateway.url.replace('http', 'ws')}/v1/responses`, { headers });
    ws.once('open', () => {
      ws.terminate();
      reject(new Error('the upgrade was accepted (101)'));
    });
    ws.once('unexpected-response', (req, res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => {
        text += chunk;
      });
      res.on('end', () => {
        req.destroy();
        resolve({ status: res.statusCode ?? 0, body: JSON.parse(text) as Message });
      });
    });
    ws.once('error', reject);
  });
}

/** `count` client text frames `{}` (masked with a zero key, as the protocol allows), back to back. */
function emptyObjectFrames(count: number): Buffer {
  const frame = Buffer.from([0x81, 0x82, 0, 0, 0, 0, 0x7b, 0x7d]);
  return Buffer.concat(Array.from({ length: count }, () => frame));
}

describe('the bounds of Responses WebSocket connections', () => {
  const fx = perTest();

  async function setup(websocket: Record<string, unknown> = {}) {
    const workers = await fx.mocks(1);
    const gateway = await fx.gateway({
      workers: [{ url: workers[0]!.url }],
      responses: { websocket },
    });
    return { worker: workers[0]!, gateway };
  }
  const completed = async (client: Client) =>
    (await client.turn({ model: 'mock-model', input: 'still there?' })).messages.at(-1)!.type;

  it('refuses an upgrade whose Origin is not allowed with 403 before the 101; listed origins and clients without Origin connect', async () => {
    const { worker, gateway } = await setup({ allowedOrigins: ['https://app.example'] });
    const plain = await Client.open(gateway);
    for (const origin of ['https://evil.example', 'http://app.example', 'https://app.example.evil', 'null']) {
      const refused = await refusedUpgrade(gateway, { origin });
      expect(refused.status, origin).toBe(403);
      expect(refused.body).toMatchObject({
        error: { code: 'origin_not_allowed', type: 'permission_error' },
      });
    }
    const app = await Client.open(gateway, { origin: 'https://app.example' });
    expect(await completed(app)).toBe('response.completed');
    // The client without an Origin header (not a browser) was answered normally meanwhile.
    expect(await completed(plain)).toBe('response.completed');
    expect(worker.stats.requests).toBe(2);
    expect(await metric(gateway.url, 'sluice_websocket_upgrades_refused_total', { reason: 'origin' })).toBe(
      4,
    );
    app.close();
    plain.close();
  });

  it('by default refuses every upgrade that carries an Origin header', async () => {
    const { gateway } = await setup();
    const refused = await refusedUpgrade(gateway, { origin: 'https://evil.example' });
    expect(refused.status).toBe(403);
    expect(refused.body).toMatchObject({ error: { code: 'origin_not_allowed' } });
    const plain = await Client.open(gateway);
    expect(await completed(plain)).toBe('response.completed');
    plain.close();
  });

  it('caps the connections of one client address: past maxConnectionsPerClient the upgrade is a 429, even in a burst; a closed one frees its slot', async () => {
    const { gateway } = await setup({ maxConnectionsPerClient: 2 });
    const opened = await Promise.allSettled(Array.from({ length: 10 }, () => Client.open(gateway)));
    const clients = opened.flatMap((o) => (o.status === 'fulfilled' ? [o.value] : []));
    expect(clients).toHaveLength(2);
    const refused = await refusedUpgrade(gateway);
    expect(refused.status).toBe(429);
    expect(refused.body).toMatchObject({ error: { code: 'too_many_connections', type: 'rate_limit_error' } });
    // The connections held are answered normally meanwhile.
    expect(await completed(clients[0]!)).toBe('response.completed');
    clients[1]!.close();
    await eventually(() => clients[1]!.closed !== undefined);
    const next = await eventually(async () => {
      const attempt = await Client.open(gateway).catch(() => undefined);
      attempt?.close();
      return attempt !== undefined;
    });
    expect(next).toBeUndefined();
    expect(
      await metric(gateway.url, 'sluice_websocket_upgrades_refused_total', { reason: 'client_connections' }),
    ).toBeGreaterThanOrEqual(9);
    clients[0]!.close();
  });

  it('caps the connections in all: past maxConnections the upgrade is a 503', async () => {
    const { gateway } = await setup({ maxConnections: 2 });
    const first = await Client.open(gateway);
    const second = await Client.open(gateway);
    const refused = await refusedUpgrade(gateway);
    expect(refused.status).toBe(503);
    expect(refused.body).toMatchObject({
      error: { code: 'websocket_capacity_reached', type: 'service_unavailable_error' },
    });
    expect(await completed(first)).toBe('response.completed');
    second.close();
    await eventually(async () => {
      const attempt = await Client.open(gateway).catch(() => undefined);
      attempt?.close();
      return attempt !== undefined;
    });
    first.close();
  });

  it('stops reading a client that does not read its replies: a flood of 200,000 frames holds bounded memory, released after the close; another client is answered meanwhile', async () => {
    const gc = collector();
    const { gateway } = await setup();
    const other = await Client.open(gateway);
    const flooder = await Client.open(gateway);
    // One reply's size: each `{}` is answered with an error.
    flooder.ws.send('{}');
    const [reply] = await flooder.until((m) => m.length === 1);
    expect(reply!.error!.code).toBe('unknown_event_type');
    const frames = 200_000;
    const unbounded = frames * flooder.texts[0]!.length;
    const raw = (flooder.ws as unknown as { _socket: import('node:net').Socket })._socket;
    raw.pause();
    const used = () => {
      gc();
      const { heapUsed, external } = process.memoryUsage();
      return heapUsed + external;
    };
    // Warmed up (the other client's turns below start nothing new), then the baseline.
    for (let i = 0; i < 3; i++) await completed(other);
    const baseline = used();
    raw.write(emptyObjectFrames(frames));
    // Until the frames have all gone to the gateway, or no more of them are taken: the other
    // client's turns, answered meanwhile, are the clock.
    let unsent = -1;
    for (let still = 0; still < 5; ) {
      expect(await completed(other)).toBe('response.completed');
      still = raw.writableLength === unsent ? still + 1 : 0;
      unsent = raw.writableLength;
    }
    const held = used() - baseline;
    expect(held).toBeLessThan(unbounded / 4);
    flooder.ws.terminate();
    await eventually(() => flooder.closed !== undefined);
    expect(await completed(other)).toBe('response.completed');
    expect(used() - baseline).toBeLessThan(unbounded / 10);
    other.close();
  }, 60_000);

  it('counts only a pong answering its own ping: a peer sending unsolicited or wrong pongs is closed; a live client is answered meanwhile', async () => {
    const { gateway } = await setup({ pingIntervalMs: 100 });
    const live = await Client.open(gateway);
    const faker = await Client.open(gateway, {}, { autoPong: false });
    let pings = 0;
    faker.ws.on('ping', () => {
      pings++;
      faker.ws.pong(Buffer.from('not your payload'));
    });
    const unsolicited = setInterval(() => faker.ws.pong(), 20);
    try {
      await eventually(() => faker.closed !== undefined, 5_000);
    } finally {
      clearInterval(unsolicited);
    }
    expect(faker.closed!.code).toBe(1006);
    expect(pings).toBeGreaterThanOrEqual(1);
    expect(live.closed).toBeUndefined();
    expect(await completed(live)).toBe('response.completed');
    live.close();
  });
});
