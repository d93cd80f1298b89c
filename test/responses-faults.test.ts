import type OpenAI from 'openai';
import { describe, expect, it } from 'vitest';
import { sequence } from '../src/mock/generate.js';
import { chatBody, eventually, metric, perTest, post } from './helpers/gateway.js';

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
    const body = response.text();
    await eventually(() => workers[0]!.stats.inflight === 1);
    await new Promise((resolve) => setTimeout(resolve, 100));
    await workers[0]!.close(); // every socket destroyed, like kill -9
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
    const workers = await fx.mocks(1, { tokensPerSecond: 100 });
    const gateway = await fx.gateway({ workers: [{ url: workers[0]!.url }] });
    const controller = new AbortController();
    const response = await fetch(`${gateway.url}/v1/responses`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'mock-model', input: 'x', stream: true, max_output_tokens: 500 }),
      signal: controller.signal,
    });
    const reader = response.body!.getReader();
    const first = new TextDecoder().decode((await reader.read()).value);
    const id = (JSON.parse(/^data: (.*)$/m.exec(first)![1]!) as { response: { id: string } }).response.id;
    controller.abort();
    await eventually(() => workers[0]!.stats.aborted === 1 && workers[0]!.stats.inflight === 0);
    await eventually(async () => (await fetch(`${gateway.url}/v1/responses/${id}`)).status === 200);
    const stored = (await (
      await fetch(`${gateway.url}/v1/responses/${id}`)
    ).json()) as OpenAI.Responses.Response;
    expect(stored.status).toBe('failed');
    expect(stored.error?.code).toBe('client_disconnected');
    expect(await metric(gateway.url, 'sluice_client_disconnects_total', { api: 'responses' })).toBe(1);
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
    const workers = await fx.mocks(1);
    const gateway = await fx.gateway({ workers: [{ url: workers[0]!.url }] });
    expect((await post(`${gateway.url}/v1/chat/completions`, chatBody({ max_tokens: 2 }))).status).toBe(200);
  });
});
