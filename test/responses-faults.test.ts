import type OpenAI from 'openai';
import { describe, expect, it } from 'vitest';
import { sequence } from '../src/mock/generate.js';
import { storedRows } from './helpers/backends.js';
import { chatBody, eventually, metric, metricOrZero, perTest, post, sseData } from './helpers/gateway.js';

interface Parsed {
  name: string;
  data: string;
  event: { type: string; sequence_number: number; response?: OpenAI.Responses.Response };
}

function parseEvents(text: string): Parsed[] {
  return text
    .split('\n\n')
    .filter((b) => b.trim())
    .map((block) => {
      const data = /^data: (.*)$/m.exec(block)![1]!;
      return { name: /^event: (.*)$/m.exec(block)![1]!, data, event: JSON.parse(data) as Parsed['event'] };
    });
}

const terminalText = (data: string) => data.slice(data.indexOf('"response":') + 11, -1);

describe('Responses API under faults', () => {
  const fx = perTest();

  it('a worker killed mid-stream: response.failed, and its stored copy is byte-identical', async () => {
    const workers = await fx.mocks(1, { tokensPerSecond: 100 });
    const gateway = await fx.gateway({ workers: [{ url: workers[0]!.url }] });
    const response = await fetch(`${gateway.url}/v1/responses`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'mock-model', input: 'x', stream: true, max_output_tokens: 200 }),
    });
    // Read until some text has been shown, then kill the worker mid-stream.
    const reader = response.body!.getReader();
    const decoder = new TextDecoder();
    let received = '';
    while (!received.includes('event: response.output_text.delta')) {
      const { value, done } = await reader.read();
      if (done) throw new Error('the stream ended early');
      received += decoder.decode(value, { stream: true });
    }
    await workers[0]!.close(); // every socket destroyed, like kill -9
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      received += decoder.decode(value, { stream: true });
    }
    const body = Promise.resolve(received);
    const events = parseEvents(await body);
    const last = events.at(-1)!;
    expect(last.name).toBe('response.failed');
    const failed = last.event.response!;
    expect(failed.error?.code).toBe('request_stream_closed');
    const text = (failed.output[0] as OpenAI.Responses.ResponseOutputMessage)
      .content[0] as OpenAI.Responses.ResponseOutputText;
    expect(text.text.length).toBeGreaterThan(0);
    expect(sequence(200).startsWith(text.text)).toBe(true);
    const stored = await (await fetch(`${gateway.url}/v1/responses/${failed.id}`)).text();
    expect(stored).toBe(terminalText(last.data));
    expect(JSON.parse(stored).status).toBe('failed');
  });

  it('the idle timeout ends a stalled response with response.failed and aborts the engine', async () => {
    const workers = await fx.mocks(1);
    const gateway = await fx.gateway({ workers: [{ url: workers[0]!.url }], timeouts: { idleMs: 200 } });
    const res = await post(
      `${gateway.url}/v1/responses`,
      { model: 'mock-model', input: 'x', stream: true },
      {
        'x-mock-fault': 'stall_after:2',
      },
    );
    const last = parseEvents(res.text).at(-1)!;
    expect(last.event.response!.error?.code).toBe('stream_idle_timeout');
    expect(
      await metric(gateway.url, 'sluice_stream_failures_total', { api: 'responses', reason: 'idle_timeout' }),
    ).toBe(1);
    await eventually(() => workers[0]!.stats.aborted === 1);
  });

  it('an in-band error frame fails the response with upstream_error_frame', async () => {
    const workers = await fx.mocks(1);
    const gateway = await fx.gateway({ workers: [{ url: workers[0]!.url }] });
    const res = await post(
      `${gateway.url}/v1/responses`,
      { model: 'mock-model', input: 'x' },
      {
        'x-mock-fault': 'error_frame_after:2',
      },
    );
    const failed = res.json() as OpenAI.Responses.Response;
    expect(failed.status).toBe('failed');
    expect(failed.error?.code).toBe('upstream_error_frame');
    expect((failed.output[0] as { status: string }).status).toBe('incomplete');
  });

  it('a client that goes away aborts the engine; what it was shown is stored as failed', async () => {
    // The engine sends 5 tokens, then goes silent (the idle timeout is far away): the client has
    // seen every event the gateway produced when it leaves, so the stored copy must hold exactly those.
    const workers = await fx.mocks(1, { tokensPerSecond: 0 });
    const gateway = await fx.gateway({ workers: [{ url: workers[0]!.url }] });
    const controller = new AbortController();
    const response = await fetch(`${gateway.url}/v1/responses`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-mock-fault': 'stall_after:5' },
      body: JSON.stringify({ model: 'mock-model', input: 'x', stream: true, max_output_tokens: 500 }),
      signal: controller.signal,
    });
    const reader = response.body!.getReader();
    const decoder = new TextDecoder();
    let received = '';
    while (
      parseEvents(received.slice(0, received.lastIndexOf('\n\n') + 2)).filter(
        (e) => e.name === 'response.output_text.delta',
      ).length < 5
    ) {
      const { value, done } = await reader.read();
      if (done) throw new Error('the stream ended early');
      received += decoder.decode(value, { stream: true });
    }
    expect(received.endsWith('\n\n')).toBe(true);
    const shown = parseEvents(received);
    const id = shown[0]!.event.response!.id;
    controller.abort();
    await eventually(() => workers[0]!.stats.aborted === 1 && workers[0]!.stats.inflight === 0);
    await eventually(async () => (await fetch(`${gateway.url}/v1/responses/${id}`)).status === 200);
    const storedText = await (await fetch(`${gateway.url}/v1/responses/${id}`)).text();
    const stored = JSON.parse(storedText) as OpenAI.Responses.Response;
    expect(stored.status).toBe('failed');
    expect(stored.error?.code).toBe('client_disconnected');
    // The stored text is exactly the deltas the client was shown, no more and no less.
    const shownText = shown
      .filter((e) => e.name === 'response.output_text.delta')
      .map((e) => (e.event as unknown as { delta: string }).delta)
      .join('');
    expect(shownText).toBe(sequence(5));
    const message = stored.output[0] as OpenAI.Responses.ResponseOutputMessage;
    expect(message.status).toBe('incomplete');
    expect((message.content[0] as OpenAI.Responses.ResponseOutputText).text).toBe(shownText);
    // The stored event log begins with the very bytes of every event the client received; what
    // follows is only the closing of the open items and the terminal event, whose response is the stored JSON.
    const row = (await storedRows(gateway.context.store, 'responses')).find((r) => r.id === id)!;
    const eventsJson = String(row.events_json);
    const prefix = `[${shown.map((e) => e.data).join(',')},`;
    expect(eventsJson.startsWith(prefix)).toBe(true);
    const rest = JSON.parse(`[${eventsJson.slice(prefix.length)}`) as { type: string }[];
    expect(rest.map((e) => e.type)).toEqual([
      'response.output_text.done',
      'response.content_part.done',
      'response.output_item.done',
      'response.failed',
    ]);
    expect(eventsJson.endsWith(`"response":${storedText}}]`)).toBe(true);
    expect(row.json).toBe(storedText);
    expect(await metric(gateway.url, 'sluice_client_disconnects_total', { api: 'responses' })).toBe(1);
  });

  it('a resumed response: what was streamed is what is stored, byte for byte', async () => {
    const workers = await fx.mocks(2, { tokensPerSecond: 0 });
    workers[0]!.setFault('reset_after:4');
    const gateway = await fx.gateway({
      workers: workers.map((w, i) => ({ url: w.url, id: `w${i}` })),
      routing: { policy: 'round_robin' },
      resume: { enabled: true },
    });
    const res = await post(`${gateway.url}/v1/responses`, {
      model: 'mock-model',
      input: 'x',
      stream: true,
      max_output_tokens: 10,
    });
    const events = parseEvents(res.text);
    const last = events.at(-1)!;
    expect(last.name).toBe('response.incomplete');
    expect(events.map((e) => e.event.sequence_number)).toEqual(events.map((_, i) => i));
    const deltas = events
      .filter((e) => e.name === 'response.output_text.delta')
      .map((e) => (e.event as unknown as { delta: string }).delta)
      .join('');
    expect(deltas).toBe(sequence(10));
    expect(workers[1]!.stats.requests).toBe(1); // it really was resumed
    const id = last.event.response!.id;
    const storedText = await (await fetch(`${gateway.url}/v1/responses/${id}`)).text();
    expect(storedText).toBe(terminalText(last.data));
    expect(JSON.parse(storedText).metadata).toMatchObject({ sluice_resumes: '1', sluice_workers: 'w0,w1' });
    const row = (await storedRows(gateway.context.store, 'responses')).find((r) => r.id === id)!;
    expect(row.events_json).toBe(`[${events.map((e) => e.data).join(',')}]`);
    // And the replay serves the same events again.
    const replay = parseEvents(await (await fetch(`${gateway.url}/v1/responses/${id}?stream=true`)).text());
    expect(replay.map((e) => e.data)).toEqual(events.map((e) => e.data));
  });

  it('a store that fails is reported in the terminal event, never silently', async () => {
    const workers = await fx.mocks(1, { tokensPerSecond: 100 });
    const gateway = await fx.gateway({ workers: [{ url: workers[0]!.url }] });
    const pending = post(`${gateway.url}/v1/responses`, {
      model: 'mock-model',
      input: 'x',
      stream: true,
      max_output_tokens: 20,
    });
    await eventually(() => workers[0]!.stats.inflight === 1);
    await gateway.context.store!.close(); // the database goes away under the running response
    const last = parseEvents((await pending).text).at(-1)!;
    expect(last.name).toBe('response.failed');
    expect(last.event.response!.error?.code).toBe('store_write_failed');
    // The client still got everything that was generated.
    expect(
      (last.event.response!.output[0] as OpenAI.Responses.ResponseOutputMessage).content[0],
    ).toMatchObject({
      text: sequence(20),
    });
  });

  it('a background response streamed to a client survives the client going away', async () => {
    const workers = await fx.mocks(1, { tokensPerSecond: 100 });
    const gateway = await fx.gateway({ workers: [{ url: workers[0]!.url }] });
    const controller = new AbortController();
    const response = await fetch(`${gateway.url}/v1/responses`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        model: 'mock-model',
        input: 'x',
        stream: true,
        background: true,
        max_output_tokens: 30,
      }),
      signal: controller.signal,
    });
    const reader = response.body!.getReader();
    const first = new TextDecoder().decode((await reader.read()).value);
    const created = JSON.parse(/^data: (.*)$/m.exec(first)![1]!) as {
      type: string;
      response: { id: string; status: string };
    };
    expect(created.type).toBe('response.created');
    expect(created.response.status).toBe('queued');
    controller.abort();
    await eventually(async () => {
      const now = (await (await fetch(`${gateway.url}/v1/responses/${created.response.id}`)).json()) as {
        status: string;
      };
      return now.status === 'incomplete';
    }, 5_000);
    expect(workers[0]!.stats.aborted).toBe(0);
    // A late watcher replays the whole ladder from storage.
    const replay = parseEvents(
      await (await fetch(`${gateway.url}/v1/responses/${created.response.id}?stream=true`)).text(),
    );
    expect(replay[0]!.name).toBe('response.created');
    expect(replay.at(-1)!.name).toBe('response.incomplete');
    expect(replay.map((e) => e.event.sequence_number)).toEqual(replay.map((_, i) => i));
  });

  it('chat completions keep working beside responses on the same gateway', async () => {
    const workers = await fx.mocks(1, { tokensPerSecond: 200 });
    const gateway = await fx.gateway({ workers: [{ url: workers[0]!.url }] });
    // Both APIs at once, each streamed and not, on the same gateway and worker.
    const [responseStream, chatStream, response, chat] = await Promise.all([
      post(`${gateway.url}/v1/responses`, {
        model: 'mock-model',
        input: 'x',
        stream: true,
        max_output_tokens: 6,
      }),
      post(`${gateway.url}/v1/chat/completions`, chatBody({ stream: true, max_tokens: 6 })),
      post(`${gateway.url}/v1/responses`, { model: 'mock-model', input: 'x', max_output_tokens: 3 }),
      post(`${gateway.url}/v1/chat/completions`, chatBody({ max_tokens: 3 })),
    ]);
    expect(responseStream.status).toBe(200);
    const events = parseEvents(responseStream.text);
    expect(events.at(-1)!.name).toBe('response.incomplete');
    expect(
      (events.at(-1)!.event.response!.output[0] as OpenAI.Responses.ResponseOutputMessage).content[0],
    ).toMatchObject({ text: sequence(6) });
    expect(chatStream.status).toBe(200);
    const chunks = sseData(chatStream.text);
    expect(chunks.at(-1)).toBe('[DONE]');
    expect(
      chunks
        .slice(0, -1)
        .map(
          (c) =>
            (JSON.parse(c) as { choices: { delta: { content?: string } }[] }).choices[0]?.delta.content ?? '',
        )
        .join(''),
    ).toBe(sequence(6));
    expect(response.status).toBe(200);
    expect((response.json() as OpenAI.Responses.Response).status).toBe('incomplete');
    expect(chat.status).toBe(200);
    expect((chat.json() as { choices: { message: { content: string } }[] }).choices[0]!.message.content).toBe(
      sequence(3),
    );
    expect(workers[0]!.stats.requests).toBe(4);
  });
});

interface FaultCase {
  fault: string;
  code: string;
  reason: string;
  /** The gateway had to abort the engine (it was still sending, or silent). */
  aborts: boolean;
  /** Text deltas the client sees before the terminal event (max_output_tokens is 10). */
  shown: number;
}

/** Every fault the chat suite (stream-integrity) streams, through the Responses API. */
const FAULTS: FaultCase[] = [
  {
    fault: 'reset_after:3',
    code: 'request_stream_closed',
    reason: 'upstream_closed',
    aborts: false,
    shown: 3,
  },
  { fault: 'eof_after:3', code: 'request_stream_closed', reason: 'upstream_closed', aborts: false, shown: 3 },
  { fault: 'no_finish', code: 'request_stream_closed', reason: 'upstream_closed', aborts: false, shown: 10 },
  {
    fault: 'error_frame_after:3',
    code: 'upstream_error_frame',
    reason: 'upstream_error_frame',
    aborts: false,
    shown: 3,
  },
  {
    fault: 'error_frame_str_after:3',
    code: 'upstream_error_frame',
    reason: 'upstream_error_frame',
    aborts: false,
    shown: 3,
  },
  {
    fault: 'event_error_after:3',
    code: 'upstream_error_frame',
    reason: 'upstream_error_frame',
    aborts: false,
    shown: 3,
  },
  { fault: 'stall_after:3', code: 'stream_idle_timeout', reason: 'idle_timeout', aborts: true, shown: 3 },
  { fault: 'malformed_after:3', code: 'malformed_chunk', reason: 'read_error', aborts: true, shown: 3 },
];

describe('Responses API under every fault of the chat suite', () => {
  const fx = perTest();

  for (const c of FAULTS) {
    it(`${c.fault}: one response.failed with ${c.code}, items closed incomplete, stored byte-identical`, async () => {
      const workers = await fx.mocks(1, { tokensPerSecond: 200 });
      const gateway = await fx.gateway({
        workers: [{ url: workers[0]!.url }],
        timeouts: { idleMs: 250 },
        breaker: { failureThreshold: 1000 },
      });
      const labels = { api: 'responses', model: 'mock-model', reason: c.reason };
      const before = await metricOrZero(gateway.url, 'sluice_stream_failures_total', labels);
      const res = await post(
        `${gateway.url}/v1/responses`,
        { model: 'mock-model', input: 'x', stream: true, max_output_tokens: 10 },
        { 'x-mock-fault': c.fault },
      );
      expect(res.status).toBe(200);
      const events = parseEvents(res.text);
      expect(events.map((e) => e.event.sequence_number)).toEqual(events.map((_, i) => i));
      const terminals = events.filter((e) =>
        ['response.completed', 'response.incomplete', 'response.failed'].includes(e.name),
      );
      expect(terminals).toHaveLength(1);
      const last = events.at(-1)!;
      expect(last.name).toBe('response.failed');
      expect(last.event.response!.error?.code).toBe(c.code);
      const deltas = events.filter((e) => e.name === 'response.output_text.delta');
      expect(deltas).toHaveLength(c.shown);
      expect(events.map((e) => e.name).slice(-4, -1)).toEqual([
        'response.output_text.done',
        'response.content_part.done',
        'response.output_item.done',
      ]);
      const message = last.event.response!.output[0] as OpenAI.Responses.ResponseOutputMessage;
      expect(message.status).toBe('incomplete');
      expect((message.content[0] as OpenAI.Responses.ResponseOutputText).text).toBe(sequence(c.shown));
      const stored = await (await fetch(`${gateway.url}/v1/responses/${last.event.response!.id}`)).text();
      expect(stored).toBe(terminalText(last.data));
      expect(await metric(gateway.url, 'sluice_stream_failures_total', labels)).toBe(before + 1);
      expect(workers[0]!.stats.requests).toBe(1); // never retried after the first byte
      await eventually(() => workers[0]!.stats.inflight === 0);
      expect(workers[0]!.stats.aborted).toBe(c.aborts ? 1 : 0);
    });
  }

  it('the overall deadline: response.failed with stream_deadline_exceeded, the engine aborted', async () => {
    const workers = await fx.mocks(1, { tokensPerSecond: 200 });
    const gateway = await fx.gateway({ workers: [{ url: workers[0]!.url }], timeouts: { deadlineMs: 300 } });
    const res = await post(`${gateway.url}/v1/responses`, {
      model: 'mock-model',
      input: 'x',
      stream: true,
      max_output_tokens: 5000,
    });
    const events = parseEvents(res.text);
    const last = events.at(-1)!;
    expect(last.name).toBe('response.failed');
    expect(last.event.response!.error?.code).toBe('stream_deadline_exceeded');
    expect(events.filter((e) => e.name === 'response.output_text.delta').length).toBeGreaterThan(0);
    const stored = await (await fetch(`${gateway.url}/v1/responses/${last.event.response!.id}`)).text();
    expect(stored).toBe(terminalText(last.data));
    expect(
      await metric(gateway.url, 'sluice_stream_failures_total', { api: 'responses', reason: 'deadline' }),
    ).toBe(1);
    await eventually(() => workers[0]!.stats.aborted === 1 && workers[0]!.stats.inflight === 0);
  });
});
