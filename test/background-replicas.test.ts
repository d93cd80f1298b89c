import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Gateway } from '../src/gateway.js';
import type { MockWorker } from '../src/mock/mock-worker.js';
import { backends } from './helpers/backends.js';
import { eventually, post, sseData, startGateway, startMocks } from './helpers/gateway.js';

interface Event {
  type: string;
  sequence_number: number;
  response?: { status: string };
}

const TERMINAL = /^response\.(completed|incomplete|failed)$/;
const postgres = backends().find((b) => b.name === 'postgres')!;

/** Two gateway processes' worth of gateways on one PostgreSQL schema. */
describe('background responses across replicas (postgres)', { timeout: 120_000 }, () => {
  let slow: MockWorker;
  let fast: MockWorker;
  let a: Gateway;
  let b: Gateway;

  beforeAll(async () => {
    slow = (await startMocks(1, { tokensPerSecond: 25 }))[0]!;
    fast = (await startMocks(1, { tokensPerSecond: 40, models: ['fast-model'] }))[0]!;
    const workers = [{ url: slow.url }, { url: fast.url }];
    a = await startGateway({ workers, storage: postgres.storage() });
    b = await startGateway({ workers, storage: postgres.storage(), responses: { followPollMs: 50 } });
  });
  afterAll(async () => {
    await Promise.all([a?.close(), b?.close()]);
    await Promise.all([slow?.close(), fast?.close()]);
    await postgres.cleanup();
  });

  async function storedEvents(id: string): Promise<Event[]> {
    const stored = await a.context.store!.getResponse(id);
    return JSON.parse(stored!.eventsJson!) as Event[];
  }

  it('a response running on one replica is streamed live from the other, to its terminal event', async () => {
    const started = await post(`${a.url}/v1/responses`, {
      model: 'mock-model',
      input: 'follow me',
      background: true,
      max_output_tokens: 25,
    });
    const { id } = started.json() as { id: string };
    const follow = (query: string) =>
      fetch(`${b.url}/v1/responses/${id}?stream=true${query}`, { signal: AbortSignal.timeout(20_000) }).then(
        async (res) => {
          expect(res.status).toBe(200);
          return sseData(await res.text()).map((d) => JSON.parse(d) as Event);
        },
      );
    // B's follower, read as it arrives: each delta notes whether A's run was still going then.
    const whileRunning: boolean[] = [];
    const whole = fetch(`${b.url}/v1/responses/${id}?stream=true`, {
      signal: AbortSignal.timeout(20_000),
    }).then(async (res) => {
      expect(res.status).toBe(200);
      const decoder = new TextDecoder();
      let text = '';
      for await (const chunk of res.body!) {
        const part = decoder.decode(chunk, { stream: true });
        const live = a.context.responses.liveRun(id) !== undefined;
        for (const _ of part.matchAll(/"type":"response\.output_text\.delta"/g)) whileRunning.push(live);
        text += part;
      }
      return sseData(text).map((d) => JSON.parse(d) as Event);
    });
    // Once some output is stored, a second follower joins mid-way from a sequence number.
    await eventually(async () => (await storedEvents(id)).length > 6, 10_000);
    const partial = follow('&starting_after=4');
    const [followed, fromFour] = await Promise.all([whole, partial]);
    const stored = await storedEvents(id);
    // The mock stops on max_output_tokens: incomplete is how it ends.
    expect(stored.at(-1)!.type).toBe('response.incomplete');
    expect(followed).toEqual(stored);
    expect(fromFour).toEqual(stored.filter((e) => e.sequence_number > 4));
    const numbers = followed.map((e) => e.sequence_number);
    for (let i = 1; i < numbers.length; i++) expect(numbers[i]).toBeGreaterThan(numbers[i - 1]!);
    expect(followed.filter((e) => TERMINAL.test(e.type))).toHaveLength(1);
    // Output arrived while it ran, not all at the end: most of B's deltas reached it before A's run ended.
    expect(whileRunning).toHaveLength(followed.filter((e) => e.type === 'response.output_text.delta').length);
    expect(whileRunning.filter(Boolean).length).toBeGreaterThan(whileRunning.length / 2);
  });

  it('a finished response is replayed from the other replica and the stream ends', async () => {
    const created = await post(`${a.url}/v1/responses`, {
      model: 'fast-model',
      input: 'x',
      max_output_tokens: 3,
    });
    const { id } = created.json() as { id: string };
    const res = await fetch(`${b.url}/v1/responses/${id}?stream=true`, {
      signal: AbortSignal.timeout(5_000),
    });
    const events = sseData(await res.text()).map((d) => JSON.parse(d) as Event);
    expect(events).toEqual(await storedEvents(id));
  });

  it('200 short background responses: none reads in_progress once they end (the final write always wins)', async () => {
    const ids: string[] = [];
    for (let batch = 0; batch < 4; batch++) {
      const created = await Promise.all(
        Array.from({ length: 50 }, (_, i) =>
          post(`${(batch + i) % 2 === 0 ? a.url : b.url}/v1/responses`, {
            model: 'fast-model',
            input: `short ${batch}-${i}`,
            background: true,
            max_output_tokens: 4 + (i % 8),
          }),
        ),
      );
      for (const c of created) {
        expect(c.status).toBe(200);
        ids.push((c.json() as { id: string }).id);
      }
    }
    const unfinished = async () => {
      let count = 0;
      for (const id of ids) {
        const stored = await a.context.store!.getResponse(id);
        if (stored!.status === 'queued' || stored!.status === 'in_progress') count++;
      }
      return count;
    };
    await eventually(async () => (await unfinished()) === 0, 60_000);
    // Late progress writes, if any were still in flight, have landed by now.
    await new Promise((resolve) => setTimeout(resolve, 1_000));
    expect(await unfinished()).toBe(0);
    for (const id of ids) {
      const stored = (await a.context.store!.getResponse(id))!;
      expect(stored.status).toBe('incomplete');
      const events = JSON.parse(stored.eventsJson!) as Event[];
      expect(events.at(-1)!.type).toBe('response.incomplete');
      expect(events.at(-1)!.response).toEqual(JSON.parse(stored.json));
      expect(events.map((e) => e.sequence_number)).toEqual(events.map((_, i) => i));
    }
  });
});
