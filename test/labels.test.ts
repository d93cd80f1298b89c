import { randomUUID } from 'node:crypto';
import { Writable } from 'node:stream';
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { parseConfig } from '../src/config/load.js';
import { Gateway } from '../src/gateway.js';
import { createMockWorker } from '../src/mock/mock-worker.js';
import { modelLabel, REQUESTED_MODEL_MAX, UNKNOWN_MODEL } from '../src/observability/model-label.js';
import { metric, post } from './helpers/gateway.js';

/**
 * A client's model string never becomes a label: requests for models nobody serves, on every
 * route, leave no series, no dashboard row and no `model` log field carrying their string.
 */
describe('model labels are bounded', () => {
  it('one function decides: a known model is itself, anything else is unknown', () => {
    const knows = (m: string) => m === 'llama';
    expect(modelLabel(knows, 'llama')).toBe('llama');
    expect(modelLabel(knows, 'llama-typo')).toBe(UNKNOWN_MODEL);
    expect(modelLabel(knows, 42)).toBe(UNKNOWN_MODEL);
    expect(modelLabel(knows, undefined)).toBe(UNKNOWN_MODEL);
  });

  it('unknown models on every route: no series in /metrics, no dashboard row, `unknown` in logs', async () => {
    const lines: Record<string, unknown>[] = [];
    const sink = new Writable({
      write(chunk: Buffer, _encoding, done) {
        for (const line of chunk.toString('utf8').split('\n')) if (line) lines.push(JSON.parse(line));
        done();
      },
    });
    const worker = await createMockWorker({});
    const gateway = new Gateway(
      parseConfig({
        server: { port: 0 },
        storage: { kind: 'sqlite', path: ':memory:' },
        workers: [{ url: worker.url }],
      }),
      { logger: pino({ level: 'info' }, sink), defaultMetrics: false },
    );
    await gateway.start();
    const url = gateway.url;
    try {
      // The dashboard's history starts before the requests, so that it derives points from them.
      expect((await fetch(`${url}/dashboard/data`)).status).toBe(200);
      const names: string[] = [];
      const fresh = () => {
        // Long enough to show that the log keeps only a cut-down copy.
        const name = `rnd-${randomUUID()}-${'x'.repeat(80)}`;
        names.push(name);
        return name;
      };
      const calls: [string, Record<string, unknown>, number][] = [
        ['/v1/chat/completions', { model: fresh(), messages: [{ role: 'user', content: 'hi' }] }, 404],
        [
          '/v1/chat/completions',
          { model: fresh(), stream: true, messages: [{ role: 'user', content: 'hi' }] },
          404,
        ],
        ['/v1/completions', { model: fresh(), prompt: 'hi' }, 404],
        ['/v1/completions', { model: fresh(), prompt: 'hi', stream: true }, 404],
        ['/v1/responses', { model: fresh(), input: 'hi' }, 404],
        ['/v1/responses', { model: fresh(), input: 'hi', stream: true }, 404],
        ['/v1/responses', { model: fresh(), input: 'hi', background: true }, 404],
        ['/v1/responses', { model: fresh(), input: 'hi', background: true, stream: true }, 404],
        // Bodies that fail validation, with an unknown model in them.
        ['/v1/chat/completions', { model: fresh(), messages: 'not a list' }, 400],
        ['/v1/completions', { model: fresh() }, 400],
        ['/v1/responses', { model: fresh(), input: [] }, 400],
        ['/v1/responses', { model: fresh(), input: 'hi', temperature: 9 }, 400],
      ];
      for (const [path, body, status] of calls) {
        const res = await post(`${url}${path}`, body);
        expect(res.status, `${path} ${JSON.stringify(body).slice(0, 80)}`).toBe(status);
      }
      // Known model, for contrast: it is labelled with its own name.
      expect(
        (
          await post(`${url}/v1/chat/completions`, {
            model: 'mock-model',
            max_tokens: 2,
            messages: [{ role: 'user', content: 'hi' }],
          })
        ).status,
      ).toBe(200);

      const scrape = await (await fetch(`${url}/metrics`)).text();
      for (const name of names) expect(scrape).not.toContain(name.slice(0, 40));
      expect(scrape).not.toContain('rnd-');
      expect(await metric(url, 'sluice_requests_total', { model: UNKNOWN_MODEL })).toBe(calls.length);
      expect(await metric(url, 'sluice_requests_total', { model: 'mock-model' })).toBe(1);

      // Two ticks apart, so that the history holds points derived from the requests.
      await new Promise((resolve) => setTimeout(resolve, 1_100));
      const res = await fetch(`${url}/dashboard/data`);
      const text = await res.text();
      expect(text).not.toContain('rnd-');
      const snapshot = JSON.parse(text) as {
        models: { model: string; requests: number }[];
        series: { models: { model: string }[] };
        recent: { model: string }[];
      };
      expect(snapshot.models.map((m) => m.model).sort()).toEqual(['mock-model', UNKNOWN_MODEL]);
      expect(snapshot.models.find((m) => m.model === UNKNOWN_MODEL)?.requests).toBe(calls.length);
      for (const series of snapshot.series.models) {
        expect(['mock-model', UNKNOWN_MODEL]).toContain(series.model);
      }
      expect(snapshot.recent.filter((r) => r.model === UNKNOWN_MODEL)).toHaveLength(calls.length);

      // Logs: `model` is a label; the client's string is kept apart, cut short.
      const ended = lines.filter((l) => l.msg === 'request ended');
      expect(ended.length).toBe(calls.length + 1);
      for (const line of lines) {
        expect(['mock-model', UNKNOWN_MODEL, undefined]).toContain(line.model);
      }
      const unknown = ended.filter((l) => l.model === UNKNOWN_MODEL);
      expect(unknown).toHaveLength(calls.length);
      for (const line of unknown) {
        const requested = String(line.requestedModel);
        expect(requested.startsWith('rnd-')).toBe(true);
        expect(requested.length).toBeLessThanOrEqual(REQUESTED_MODEL_MAX + 1);
      }
    } finally {
      await gateway.close();
      await worker.close();
    }
  });
});
