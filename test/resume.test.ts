import OpenAI from 'openai';
import { describe, expect, it } from 'vitest';
import { sequence } from '../src/mock/generate.js';
import { chatBody, eventually, metric, metricOrZero, perTest, post, sseData } from './helpers/gateway.js';

interface Chunk {
  id: string;
  created: number;
  choices: {
    index: number;
    delta?: { role?: string; content?: string };
    text?: string;
    finish_reason: string | null;
  }[];
  usage?: { prompt_tokens: number; completion_tokens: number; total_tokens: number };
}

/**
 * Mid-stream resume: worker A (the first one round robin picks) breaks its stream; the gateway
 * continues it on worker B. The mock continues its deterministic word sequence from where a
 * continuation's partial text left off, so an uninterrupted stream is exactly sequence(N).
 */
describe('mid-stream failover: a dead worker does not cost the client its answer', () => {
  const fx = perTest();

  async function setup(
    faultA: string | undefined,
    resume: { enabled?: boolean; maxAttempts?: number } | undefined,
    extra = 1,
  ) {
    const workers = await fx.mocks(1 + extra, { tokensPerSecond: 0 });
    workers[0]!.setFault(faultA);
    const gateway = await fx.gateway({
      workers: workers.map((w, i) => ({ url: w.url, id: `w${i}` })),
      routing: { policy: 'round_robin' },
      models: resume ? { 'mock-model': { resume } } : {},
    });
    return { workers, gateway };
  }

  const chatStream = (
    url: string,
    headers: Record<string, string> = {},
    extra: Record<string, unknown> = {},
  ) =>
    post(
      `${url}/v1/chat/completions`,
      chatBody({ stream: true, max_tokens: 12, stream_options: { include_usage: true }, ...extra }),
      {
        'x-request-id': 'resume-1',
        ...headers,
      },
    );

  it('chat: one uninterrupted stream, no duplicate and no gap, one id, usage of both attempts', async () => {
    const { workers, gateway } = await setup('reset_after:5', { enabled: true });
    const res = await chatStream(gateway.url);
    expect(res.headers.get('x-sluice-worker')).toBe('w0');
    const events = sseData(res.text);
    expect(events.at(-1)).toBe('[DONE]');
    expect(events.filter((e) => e === '[DONE]')).toHaveLength(1);
    const chunks = events.slice(0, -1).map((e) => JSON.parse(e) as Chunk);
    expect(chunks.some((c) => 'error' in c)).toBe(false);
    const text = chunks.map((c) => c.choices[0]?.delta?.content ?? '').join('');
    expect(text).toBe(sequence(12));
    expect(new Set(chunks.map((c) => c.id)).size).toBe(1);
    expect(new Set(chunks.map((c) => c.created)).size).toBe(1);
    expect(chunks.filter((c) => c.choices[0]?.delta?.role)).toHaveLength(1);
    expect(chunks.filter((c) => c.choices[0]?.finish_reason)).toHaveLength(1);
    // The continuation: another worker, a fresh request id, the partial text to continue, fewer tokens.
    expect(workers[1]!.stats.requestIds).toEqual(['resume-1-resume1']);
    const continuation = workers[1]!.stats.lastBodies.at(-1) as {
      messages: { role: string; content: string }[];
      continue_final_message: boolean;
      add_generation_prompt: boolean;
      max_tokens: number;
    };
    expect(continuation.messages.at(-1)).toEqual({ role: 'assistant', content: sequence(5) });
    expect(continuation).toMatchObject({
      continue_final_message: true,
      add_generation_prompt: false,
      max_tokens: 7,
    });
    // prompt: 2 words, then 2 + the 5 words of the partial answer; completion: 5 + 7.
    expect(chunks.at(-1)!.usage).toEqual({ prompt_tokens: 9, completion_tokens: 12, total_tokens: 21 });
    expect(
      await metric(gateway.url, 'sluice_stream_resumes_total', { model: 'mock-model', outcome: 'resumed' }),
    ).toBe(1);
    expect(await metricOrZero(gateway.url, 'sluice_stream_failures_total')).toBe(0);
  });

  it('the openai SDK reads a resumed stream as one answer', async () => {
    const { gateway } = await setup('reset_after:3', { enabled: true });
    const client = new OpenAI({ baseURL: `${gateway.url}/v1`, apiKey: 'x', maxRetries: 0 });
    const stream = await client.chat.completions.create({
      model: 'mock-model',
      messages: [{ role: 'user', content: 'hi' }],
      max_tokens: 10,
      stream: true,
    });
    let text = '';
    let finish: string | null = null;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta.content ?? '';
      finish = chunk.choices[0]?.finish_reason ?? finish;
    }
    expect(text).toBe(sequence(10));
    expect(finish).toBe('length');
  });

  it('completions resume with prompt + partial output', async () => {
    const { workers, gateway } = await setup('reset_after:4', { enabled: true });
    const res = await post(`${gateway.url}/v1/completions`, {
      model: 'mock-model',
      prompt: 'Once upon a time',
      max_tokens: 9,
      stream: true,
    });
    const chunks = sseData(res.text)
      .slice(0, -1)
      .map((e) => JSON.parse(e) as Chunk);
    expect(chunks.map((c) => c.choices[0]?.text ?? '').join('')).toBe(sequence(9));
    const body = workers[1]!.stats.lastBodies.at(-1) as { prompt: string; max_tokens: number };
    expect(body).toMatchObject({ prompt: `Once upon a time${sequence(4)}`, max_tokens: 5 });
  });

  it('resumes after a stall (idle timeout) and after a retryable error frame', async () => {
    for (const fault of ['stall_after:4', 'error_frame_after:4']) {
      const workers = await fx.mocks(2);
      workers[0]!.setFault(fault);
      const gateway = await fx.gateway({
        workers: workers.map((w, i) => ({ url: w.url, id: `w${i}` })),
        routing: { policy: 'round_robin' },
        timeouts: { idleMs: 200 },
        resume: { enabled: true },
      });
      const res = await chatStream(gateway.url);
      const text = sseData(res.text)
        .slice(0, -1)
        .map((e) => (JSON.parse(e) as Chunk).choices[0]?.delta?.content ?? '')
        .join('');
      expect(text, fault).toBe(sequence(12));
    }
  });

  it('off unless turned on; X-Sluice-Resume overrides the model either way', async () => {
    const off = await setup('reset_after:5', undefined);
    const failed = await chatStream(off.gateway.url);
    expect(JSON.parse(sseData(failed.text).at(-1)!).error.code).toBe('request_stream_closed');
    // The header turns resume on for a model without it: a fresh gateway, so round robin sends
    // this request to the breaking w0 as well, and it completes only by resuming on w1.
    const forcedSetup = await setup('reset_after:5', undefined);
    const forced = await chatStream(forcedSetup.gateway.url, {
      'x-sluice-resume': 'on',
      'x-request-id': 'forced',
    });
    expect(forced.headers.get('x-sluice-worker')).toBe('w0');
    const forcedEvents = sseData(forced.text);
    expect(forcedEvents.at(-1)).toBe('[DONE]');
    expect(
      forcedEvents
        .slice(0, -1)
        .map((e) => (JSON.parse(e) as Chunk).choices[0]?.delta?.content ?? '')
        .join(''),
    ).toBe(sequence(12));
    expect(forcedSetup.workers[0]!.stats.requestIds).toEqual(['forced']);
    expect(forcedSetup.workers[1]!.stats.requestIds).toEqual(['forced-resume1']);
    expect(
      await metric(forcedSetup.gateway.url, 'sluice_stream_resumes_total', {
        model: 'mock-model',
        outcome: 'resumed',
      }),
    ).toBe(1);

    const on = await setup('reset_after:5', { enabled: true });
    const refused = await chatStream(on.gateway.url, { 'x-sluice-resume': 'off' });
    expect(refused.headers.get('x-sluice-worker')).toBe('w0');
    expect(JSON.parse(sseData(refused.text).at(-1)!).error.code).toBe('request_stream_closed');
    expect(on.workers[1]!.stats.requests).toBe(0);
    const bad = await chatStream(on.gateway.url, { 'x-sluice-resume': 'maybe' });
    expect(bad.status).toBe(400);
  });

  it('bounded: at most maxAttempts resumes, never back to a worker that failed, then the terminal failure', async () => {
    const workers = await fx.mocks(3, { tokensPerSecond: 0 });
    for (const w of workers) w.setFault('reset_after:2');
    const gateway = await fx.gateway({
      workers: workers.map((w, i) => ({ url: w.url, id: `w${i}` })),
      routing: { policy: 'round_robin' },
      resume: { enabled: true, maxAttempts: 1 },
    });
    const res = await chatStream(gateway.url, {}, { max_tokens: 20 });
    const events = sseData(res.text);
    const last = JSON.parse(events.at(-1)!) as { error: { code: string } };
    expect(last.error.code).toBe('request_stream_closed');
    const text = events
      .slice(0, -1)
      .map((e) => (JSON.parse(e) as Chunk).choices[0]?.delta?.content ?? '')
      .join('');
    expect(text).toBe(sequence(4));
    // The first attempt on w0, one continuation on another worker, nothing more.
    expect(workers[0]!.stats.requests).toBe(1);
    expect(workers.map((w) => w.stats.requests).sort()).toEqual([0, 1, 1]);
    expect(await metric(gateway.url, 'sluice_stream_resumes_total', { outcome: 'exhausted' })).toBe(1);
    expect(await metric(gateway.url, 'sluice_stream_failures_total', { reason: 'upstream_closed' })).toBe(1);
  });

  it('with no healthy worker left, the terminal failure as before', async () => {
    const { gateway } = await setup('reset_after:5', { enabled: true }, 0);
    const res = await chatStream(gateway.url);
    expect(JSON.parse(sseData(res.text).at(-1)!).error.code).toBe('request_stream_closed');
    expect(await metric(gateway.url, 'sluice_stream_resumes_total', { outcome: 'no_worker' })).toBe(1);
  });

  it('a tool call in progress is not continued: the normal terminal failure', async () => {
    const { workers, gateway } = await setup('reset_after:2', { enabled: true });
    const res = await post(
      `${gateway.url}/v1/chat/completions`,
      chatBody({ stream: true, tools: [{ type: 'function', function: { name: 'get_weather' } }] }),
      { 'x-mock-tool-call': 'get_weather' },
    );
    expect(JSON.parse(sseData(res.text).at(-1)!).error.code).toBe('request_stream_closed');
    expect(workers[1]!.stats.requests).toBe(0);
    expect(await metric(gateway.url, 'sluice_stream_resumes_total', { outcome: 'unsafe' })).toBe(1);
  });

  it('structured output is not continued as text: a cut json_schema stream ends typed, never as an invalid document', async () => {
    const { workers, gateway } = await setup('reset_after:5', { enabled: true });
    const response_format = {
      type: 'json_schema',
      json_schema: {
        name: 'trip',
        schema: { type: 'object', properties: { city: { type: 'string' }, days: { type: 'integer' } } },
      },
    };
    // What a continuation would get from an engine that enforces the schema (the mock does, as
    // vLLM and SGLang do): a new document after the prefill, so the two stitched are not JSON.
    const whole = sseData(
      (await post(`${workers[1]!.url}/v1/chat/completions`, chatBody({ stream: true, response_format })))
        .text,
    )
      .slice(0, -1)
      .map((e) => (JSON.parse(e) as Chunk).choices[0]?.delta?.content ?? '')
      .join('');
    expect(JSON.parse(whole)).toEqual({ city: sequence(8).trim(), days: 7 });
    const shown = whole.slice(0, 16);
    const continued = sseData(
      (
        await post(
          `${workers[1]!.url}/v1/chat/completions`,
          chatBody({
            stream: true,
            response_format,
            messages: [
              { role: 'user', content: 'hi' },
              { role: 'assistant', content: shown },
            ],
            continue_final_message: true,
            add_generation_prompt: false,
          }),
        )
      ).text,
    )
      .slice(0, -1)
      .map((e) => (JSON.parse(e) as Chunk).choices[0]?.delta?.content ?? '')
      .join('');
    expect(() => JSON.parse(shown + continued)).toThrow();
    const before = workers[1]!.stats.requests;
    // Through the gateway, cut after 5 pieces: the normal terminal failure, no continuation.
    const res = await chatStream(gateway.url, {}, { response_format });
    const events = sseData(res.text);
    expect(JSON.parse(events.at(-1)!).error.code).toBe('request_stream_closed');
    expect(workers[1]!.stats.requests).toBe(before);
    expect(await metric(gateway.url, 'sluice_stream_resumes_total', { outcome: 'unsafe' })).toBe(1);
  });

  it('never past the overall deadline', async () => {
    const workers = await fx.mocks(2, { tokensPerSecond: 20 });
    workers[0]!.setFault('stall_after:2');
    const gateway = await fx.gateway({
      workers: workers.map((w, i) => ({ url: w.url, id: `w${i}` })),
      routing: { policy: 'round_robin' },
      timeouts: { idleMs: 150, deadlineMs: 400 },
      resume: { enabled: true },
    });
    const started = Date.now();
    const res = await chatStream(gateway.url, {}, { max_tokens: 100 });
    const last = JSON.parse(sseData(res.text).at(-1)!) as { error: { code: string } };
    expect(last.error.code).toBe('stream_deadline_exceeded');
    // Past the deadline the stream would go on for seconds (100 tokens at 20/s); generous under load.
    expect(Date.now() - started).toBeLessThan(3_000);
    await eventually(() => workers.every((w) => w.stats.inflight === 0));
  });

  it('Responses API: the stored response is the resumed, complete one, noted in its metadata', async () => {
    const { gateway } = await setup('reset_after:6', { enabled: true });
    const client = new OpenAI({ baseURL: `${gateway.url}/v1`, apiKey: 'x', maxRetries: 0 });
    const stream = client.responses.stream({ model: 'mock-model', input: 'tell me', max_output_tokens: 14 });
    let deltas = '';
    for await (const event of stream) if (event.type === 'response.output_text.delta') deltas += event.delta;
    const final = await stream.finalResponse();
    expect(deltas).toBe(sequence(14));
    expect(final.output_text).toBe(sequence(14));
    expect(final.status).toBe('incomplete');
    expect(final.metadata).toMatchObject({ sluice_resumes: '1', sluice_workers: 'w0,w1' });
    const stored = await client.responses.retrieve(final.id);
    expect(stored.output_text).toBe(sequence(14));
    expect(stored.metadata).toMatchObject({ sluice_resumes: '1' });
    expect(stored.usage?.output_tokens).toBe(14);
  });
});
