import { gzipSync } from 'node:zlib';
import OpenAI from 'openai';
import { describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import type { Gateway } from '../src/gateway.js';
import { perTest, post } from './helpers/gateway.js';

/**
 * Issue 28, parts 12 and 13: what a request names must exist. A `function_call_output` answers a
 * call; an `after` cursor names an item of its list; a body is in a content coding the gateway
 * reads.
 */
const fixture = perTest();

async function setup() {
  const [worker] = await fixture.mocks(1);
  const gateway = await fixture.gateway({ workers: [{ url: worker!.url }] });
  return { worker: worker!, gateway, url: gateway.url };
}

interface ErrorBody {
  error: { code: string; param: string | null; type: string; message: string };
}

const TOOLS = [
  {
    type: 'function' as const,
    name: 'get_weather',
    parameters: { type: 'object', properties: { city: { type: 'string' } } },
    strict: false,
  },
];

describe('a function_call_output that answers no call', () => {
  it('HTTP: a 400 unmatched_call_id naming the item, and the engine is not asked', async () => {
    const { worker, url } = await setup();
    const res = await post(`${url}/v1/responses`, {
      model: 'mock-model',
      input: [
        { role: 'user', content: 'weather?' },
        { type: 'function_call_output', call_id: 'call_nope', output: '{"temp":21}' },
      ],
    });
    expect(res.status).toBe(400);
    expect((res.json() as ErrorBody).error).toMatchObject({
      type: 'invalid_request_error',
      code: 'unmatched_call_id',
      param: 'input[1].call_id',
    });
    // An output before its own call answers nothing either.
    const early = await post(`${url}/v1/responses`, {
      model: 'mock-model',
      input: [
        { type: 'function_call_output', call_id: 'c1', output: 'x' },
        { type: 'function_call', call_id: 'c1', name: 'get_weather', arguments: '{}' },
      ],
      stream: true,
    });
    expect(early.status).toBe(400);
    expect((early.json() as ErrorBody).error.param).toBe('input[0].call_id');
    expect(worker.stats.requests).toBe(0);
  });

  it('HTTP: an output may answer a call of the previous_response_id chain, or of the conversation; not another id', async () => {
    const { worker, url } = await setup();
    const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'x', maxRetries: 0 });
    const first = await client.responses.create(
      { model: 'mock-model', input: 'weather in Paris?', tools: TOOLS },
      { headers: { 'x-mock-tool-call': 'get_weather' } },
    );
    const call = first.output.find((item) => item.type === 'function_call')!;
    const second = await client.responses.create({
      model: 'mock-model',
      previous_response_id: first.id,
      input: [{ type: 'function_call_output', call_id: call.call_id, output: '{"temp":21}' }],
      tools: TOOLS,
    });
    expect(second.status).toBe('completed');
    const requests = worker.stats.requests;
    const refused = await client.responses
      .create({
        model: 'mock-model',
        previous_response_id: second.id,
        input: [{ type: 'function_call_output', call_id: 'call_other', output: 'x' }],
      })
      .catch((err: unknown) => err);
    expect(refused).toBeInstanceOf(OpenAI.BadRequestError);
    const error = refused as InstanceType<typeof OpenAI.BadRequestError>;
    expect(error.code).toBe('unmatched_call_id');
    expect(error.param).toBe('input[0].call_id');
    expect(worker.stats.requests).toBe(requests);

    const conversation = (await post(`${url}/v1/conversations`, {
      items: [
        { role: 'user', content: 'weather?' },
        { type: 'function_call', call_id: 'call_conv', name: 'get_weather', arguments: '{}' },
      ],
    }).then((r) => r.json())) as { id: string };
    const answered = await post(`${url}/v1/responses`, {
      model: 'mock-model',
      conversation: conversation.id,
      input: [{ type: 'function_call_output', call_id: 'call_conv', output: '{"temp":21}' }],
    });
    expect(answered.status).toBe(200);
    const unanswered = await post(`${url}/v1/responses`, {
      model: 'mock-model',
      conversation: conversation.id,
      input: [{ type: 'function_call_output', call_id: 'call_elsewhere', output: 'x' }],
    });
    expect(unanswered.status).toBe(400);
    expect((unanswered.json() as ErrorBody).error.code).toBe('unmatched_call_id');
  });

  it('HTTP: a conversation takes no orphan output (items endpoint and create), and one already stored is refused when a response would show it', async () => {
    const { worker, url } = await setup();
    const conversation = (await post(`${url}/v1/conversations`, {
      items: [{ role: 'user', content: 'weather?' }],
    }).then((r) => r.json())) as { id: string };
    const items = `${url}/v1/conversations/${conversation.id}/items`;
    // Issue 48 item 7: an output for a call never issued, added to the conversation.
    const orphan = await post(items, {
      items: [{ type: 'function_call_output', call_id: 'call_never_issued', output: 'pwned' }],
    });
    expect(orphan.status).toBe(400);
    expect((orphan.json() as ErrorBody).error).toMatchObject({
      type: 'invalid_request_error',
      code: 'unmatched_call_id',
      param: 'items[0].call_id',
    });
    const created = await post(`${url}/v1/conversations`, {
      items: [{ type: 'function_call_output', call_id: 'call_never_issued', output: 'pwned' }],
    });
    expect(created.status).toBe(400);
    expect((created.json() as ErrorBody).error.param).toBe('items[0].call_id');
    // Nothing was stored: a response on the conversation is answered, and shows the engine no tool result.
    const listed = (await (await fetch(items)).json()) as { data: unknown[] };
    expect(listed.data).toHaveLength(1);
    const clean = await post(`${url}/v1/responses`, {
      model: 'mock-model',
      conversation: conversation.id,
      input: 'hi',
    });
    expect(clean.status).toBe(200);
    const seen = worker.stats.lastBodies.at(-1) as { messages: { role: string }[] };
    expect(seen.messages.map((m) => m.role)).not.toContain('tool');

    // A call and its output, in one call or across two, are taken.
    const paired = await post(items, {
      items: [
        { type: 'function_call', call_id: 'call_a', name: 'get_weather', arguments: '{}' },
        { type: 'function_call_output', call_id: 'call_a', output: '{"temp":21}' },
        { type: 'function_call', call_id: 'call_b', name: 'get_weather', arguments: '{}' },
      ],
    });
    expect(paired.status).toBe(200);
    const added = (paired.json() as { data: { id: string }[] }).data;
    expect(
      (await post(items, { items: [{ type: 'function_call_output', call_id: 'call_b', output: '{}' }] }))
        .status,
    ).toBe(200);

    // An orphan left in the conversation (its call deleted, or stored before this rule) reaches no engine.
    const deleted = await fetch(`${items}/${added[0]!.id}`, { method: 'DELETE' });
    expect(deleted.status).toBe(200);
    const requests = worker.stats.requests;
    const refused = await post(`${url}/v1/responses`, {
      model: 'mock-model',
      conversation: conversation.id,
      input: 'and now?',
    });
    expect(refused.status).toBe(400);
    const error = (refused.json() as ErrorBody).error;
    expect(error).toMatchObject({ code: 'unmatched_call_id', param: 'conversation' });
    expect(error.message).toContain(added[1]!.id);
    expect(worker.stats.requests).toBe(requests);
    // Deleting the orphan the message names mends the conversation.
    expect((await fetch(`${items}/${added[1]!.id}`, { method: 'DELETE' })).status).toBe(200);
    const mended = await post(`${url}/v1/responses`, {
      model: 'mock-model',
      conversation: conversation.id,
      input: 'and now?',
    });
    expect(mended.status).toBe(200);
  });

  it('HTTP: compaction refuses an orphan output too; a previous_response_id chain cut by a deleted ancestor drops the answers to its calls', async () => {
    const { worker, url } = await setup();
    const compact = await post(`${url}/v1/responses/compact`, {
      model: 'mock-model',
      input: [
        { role: 'user', content: 'weather?' },
        { type: 'function_call_output', call_id: 'call_never_issued', output: 'x' },
      ],
    });
    expect(compact.status).toBe(400);
    expect((compact.json() as ErrorBody).error).toMatchObject({
      code: 'unmatched_call_id',
      param: 'input[1].call_id',
    });
    expect(worker.stats.requests).toBe(0);

    const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'x', maxRetries: 0 });
    const first = await client.responses.create(
      { model: 'mock-model', input: 'weather in Paris?', tools: TOOLS },
      { headers: { 'x-mock-tool-call': 'get_weather' } },
    );
    const call = first.output.find((item) => item.type === 'function_call')!;
    const second = await client.responses.create({
      model: 'mock-model',
      previous_response_id: first.id,
      input: [{ type: 'function_call_output', call_id: call.call_id, output: '{"temp":21}' }],
      tools: TOOLS,
    });
    await client.responses.delete(first.id);
    const third = await client.responses.create({
      model: 'mock-model',
      previous_response_id: second.id,
      input: 'thanks',
    });
    expect(third.status).toBe('completed');
    const seen = worker.stats.lastBodies.at(-1) as { messages: { role: string }[] };
    expect(seen.messages.map((m) => m.role)).toEqual(['assistant', 'user']);
  });

  it('WebSocket: the turn fails with the 400, and the response it continued is evicted from the connection', async () => {
    const { gateway } = await setup();
    const socket = await openSocket(gateway, { 'x-mock-tool-call': 'get_weather' });
    const first = await socket.turn({ model: 'mock-model', input: 'weather?', tools: TOOLS, store: false });
    const response = first.at(-1)!.response as { id: string; output: { type: string; call_id?: string }[] };
    const call = response.output.find((item) => item.type === 'function_call')!;
    const failed = await socket.turn({
      model: 'mock-model',
      previous_response_id: response.id,
      input: [{ type: 'function_call_output', call_id: 'call_nope', output: 'x' }],
      store: false,
    });
    expect(failed).toEqual([
      {
        type: 'error',
        status: 400,
        error: expect.objectContaining({
          type: 'invalid_request_error',
          code: 'unmatched_call_id',
          param: 'input[0].call_id',
        }),
      },
    ]);
    // Continuing from it again, even rightly, finds nothing: store=false lived only in the cache.
    const again = await socket.turn({
      model: 'mock-model',
      previous_response_id: response.id,
      input: [{ type: 'function_call_output', call_id: call.call_id, output: '{"temp":21}' }],
      store: false,
    });
    expect(again[0]).toMatchObject({
      type: 'error',
      status: 404,
      error: { code: 'previous_response_not_found' },
    });
    socket.close();
  });
});

describe('cursors and content codings', () => {
  it("input_items?after= an id that is not in the list is a 400 cursor_not_found with param 'after'", async () => {
    const { url } = await setup();
    const created = (await post(`${url}/v1/responses`, {
      model: 'mock-model',
      input: [
        { role: 'user', content: 'one' },
        { role: 'user', content: 'two' },
      ],
    }).then((r) => r.json())) as { id: string };
    const list = (await (await fetch(`${url}/v1/responses/${created.id}/input_items`)).json()) as {
      data: { id: string }[];
    };
    expect(list.data).toHaveLength(2);
    const page = await fetch(`${url}/v1/responses/${created.id}/input_items?after=${list.data[0]!.id}`);
    expect(page.status).toBe(200);
    expect(((await page.json()) as { data: { id: string }[] }).data.map((i) => i.id)).toEqual([
      list.data[1]!.id,
    ]);
    const bad = await fetch(`${url}/v1/responses/${created.id}/input_items?after=nope`);
    expect(bad.status).toBe(400);
    expect(((await bad.json()) as ErrorBody).error).toMatchObject({
      type: 'invalid_request_error',
      code: 'cursor_not_found',
      param: 'after',
    });
  });

  it("conversation items ?after= an id that is not in the conversation is a 400 cursor_not_found; the last item's id is an empty page", async () => {
    const { url } = await setup();
    const conversation = (await post(`${url}/v1/conversations`, {
      items: [
        { role: 'user', content: 'one' },
        { role: 'user', content: 'two' },
      ],
    }).then((r) => r.json())) as { id: string };
    const list = (await (
      await fetch(`${url}/v1/conversations/${conversation.id}/items?order=asc`)
    ).json()) as {
      data: { id: string }[];
    };
    expect(list.data).toHaveLength(2);
    const last = await fetch(
      `${url}/v1/conversations/${conversation.id}/items?order=asc&after=${list.data[1]!.id}`,
    );
    expect(last.status).toBe(200);
    expect((await last.json()) as { data: unknown[]; has_more: boolean }).toMatchObject({
      data: [],
      has_more: false,
    });
    const bad = await fetch(`${url}/v1/conversations/${conversation.id}/items?after=nope`);
    expect(bad.status).toBe(400);
    expect(((await bad.json()) as ErrorBody).error).toMatchObject({
      code: 'cursor_not_found',
      param: 'after',
    });
  });

  it('Content-Encoding: gzip is a 415 unsupported_content_encoding, on the framework-free routes and the others, in each API shape', async () => {
    const { worker, url } = await setup();
    const garbage = Buffer.from('this is not gzip at all');
    const gzip = (path: string, body: Buffer, encoding = 'gzip') =>
      fetch(`${url}${path}`, {
        method: 'POST',
        // (fetch sends the Content-Length of a Buffer body: the framework-free route's requests.)
        headers: { 'content-type': 'application/json', 'content-encoding': encoding },
        body,
      });
    const chat = JSON.stringify({ model: 'mock-model', messages: [{ role: 'user', content: 'hi' }] });
    // Garbage and well-formed gzip alike: the gateway reads no content coding.
    for (const [path, body] of [
      ['/v1/chat/completions', garbage],
      ['/v1/chat/completions', gzipSync(chat)],
      ['/v1/responses', garbage],
      ['/v1/conversations', garbage],
    ] as const) {
      const res = await gzip(path, body);
      expect(res.status, path).toBe(415);
      expect(res.headers.get('accept-encoding')).toBe('identity');
      expect(((await res.json()) as ErrorBody).error).toMatchObject({
        code: 'unsupported_content_encoding',
        type: 'invalid_request_error',
      });
    }
    const messages = await gzip('/v1/messages', garbage);
    expect(messages.status).toBe(415);
    expect(await messages.json()).toMatchObject({
      type: 'error',
      error: { type: 'invalid_request_error', code: 'unsupported_content_encoding' },
    });
    // identity is no coding at all.
    const plain = await gzip('/v1/chat/completions', Buffer.from(chat), 'identity');
    expect(plain.status).toBe(200);
    expect(worker.stats.requests).toBe(1);
  });
});

interface SocketMessage {
  type: string;
  status?: number;
  error?: Record<string, unknown>;
  response?: unknown;
}

/** A raw `ws` client of /v1/responses: `turn` sends a create and collects up to its terminal event or error. */
async function openSocket(gateway: Gateway, headers: Record<string, string>) {
  const ws = new WebSocket(`${gateway.url.replace('http', 'ws')}/v1/responses`, { headers });
  const messages: SocketMessage[] = [];
  let wake: (() => void) | undefined;
  ws.on('message', (data) => {
    messages.push(JSON.parse(String(data)) as SocketMessage);
    wake?.();
  });
  await new Promise<void>((resolve, reject) => {
    ws.once('open', () => resolve());
    ws.once('error', reject);
  });
  const ends = (m: SocketMessage) =>
    m.type === 'error' ||
    m.type === 'response.completed' ||
    m.type === 'response.incomplete' ||
    m.type === 'response.failed';
  return {
    async turn(event: Record<string, unknown>): Promise<SocketMessage[]> {
      const start = messages.length;
      ws.send(JSON.stringify({ type: 'response.create', ...event }));
      while (!messages.slice(start).some(ends)) await new Promise<void>((resolve) => (wake = resolve));
      return messages.slice(start);
    },
    close: () => ws.close(),
  };
}
