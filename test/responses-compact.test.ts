import OpenAI from 'openai';
import { describe, expect, it } from 'vitest';
import { sequence } from '../src/mock/generate.js';
import { perTest, post } from './helpers/gateway.js';

interface Compacted {
  id: string;
  object: string;
  created_at: number;
  output: { type: string; id: string; role?: string; content?: unknown; encrypted_content?: string }[];
  usage: { input_tokens: number; output_tokens: number; total_tokens: number };
}

describe('POST /v1/responses/compact', () => {
  const fx = perTest();

  async function setup() {
    const workers = await fx.mocks(1, { tokensPerSecond: 0 });
    const gateway = await fx.gateway({ workers: [{ url: workers[0]!.url }] });
    const last = () =>
      workers[0]!.stats.lastBodies.at(-1) as {
        stream?: boolean;
        messages: { role: string; content: unknown }[];
      };
    return { worker: workers[0]!, gateway, last };
  }

  it('summarises a conversation into compaction items that a later request expands into a shorter history', async () => {
    const { gateway, last } = await setup();
    const url = `${gateway.url}/v1/responses`;
    const first = (await post(url, { model: 'mock-model', input: 'first question' })).json() as {
      id: string;
    };
    const second = (
      await post(url, { model: 'mock-model', input: 'second question', previous_response_id: first.id })
    ).json() as { id: string };
    const original = last().messages;
    expect(original.map((m) => m.role)).toEqual(['user', 'assistant', 'user']);

    const res = await post(`${url}/compact`, {
      model: 'mock-model',
      previous_response_id: second.id,
      instructions: 'Keep the open questions.',
    });
    expect(res.status).toBe(200);
    const compacted = res.json() as Compacted;
    expect(compacted).toMatchObject({ object: 'response.compaction', usage: { output_tokens: 16 } });
    expect(compacted.id).toMatch(/^resp_/);
    expect(typeof compacted.created_at).toBe('number');
    // The summarisation request went through the normal dispatch path, not streamed.
    const asked = last();
    expect(asked.stream).toBe(false);
    expect(asked.messages[0]).toEqual({ role: 'system', content: 'Keep the open questions.' });
    expect(asked.messages.slice(1, -1).map((m) => m.role)).toEqual([
      'user',
      'assistant',
      'user',
      'assistant',
    ]);
    expect(String(asked.messages.at(-1)!.content)).toContain('summary');
    // Every user message, then one compaction item (as OpenAI shapes it).
    expect(compacted.output.map((i) => [i.type, i.role])).toEqual([
      ['message', 'user'],
      ['message', 'user'],
      ['compaction', undefined],
    ]);
    const item = compacted.output[2]!;
    expect(item.id).toMatch(/^cmp_/);
    expect(item.encrypted_content).toMatch(/^sluice\.compaction\.v1\./);

    // Given back as input: the summary replaces the assistant turns.
    const next = await post(url, {
      model: 'mock-model',
      input: [...compacted.output, { role: 'user', content: 'third question' }],
    });
    expect(next.status).toBe(200);
    expect(last().messages).toEqual([
      { role: 'user', content: 'first question' },
      { role: 'user', content: 'second question' },
      { role: 'user', content: `Summary of the earlier conversation (compacted):\n${sequence(16)}` },
      { role: 'user', content: 'third question' },
    ]);
    expect(JSON.stringify(last().messages)).not.toContain(JSON.stringify(sequence(16)));
    // The stored input keeps the compaction item, and a continuation expands it again.
    const nextId = (next.json() as { id: string }).id;
    await post(url, { model: 'mock-model', input: 'fourth', previous_response_id: nextId });
    expect(last().messages.map((m) => m.role)).toEqual(['user', 'user', 'user', 'user', 'assistant', 'user']);
    expect(last().messages[2]!.content).toContain('compacted');
  });

  it('takes input directly, and works with the openai SDK', async () => {
    const { gateway, last } = await setup();
    const client = new OpenAI({ baseURL: `${gateway.url}/v1`, apiKey: 'x', maxRetries: 0 });
    const compacted = await client.responses.compact({
      model: 'mock-model',
      input: [
        { role: 'user', content: 'hello' },
        { role: 'assistant', content: 'hi, how can I help?' },
      ],
    });
    expect(compacted.object).toBe('response.compaction');
    expect(compacted.output.map((i) => i.type)).toEqual(['message', 'compaction']);
    expect(last().messages.map((m) => m.role)).toEqual(['user', 'assistant', 'user']);
  });

  it('answers 400 without a model or anything to compact, 404 for an unknown previous_response_id', async () => {
    const { gateway } = await setup();
    const url = `${gateway.url}/v1/responses/compact`;
    const noModel = await post(url, { input: 'x' });
    expect(noModel.status).toBe(400);
    expect(noModel.json()).toMatchObject({ error: { param: 'model', type: 'invalid_request_error' } });
    const nothing = await post(url, { model: 'mock-model' });
    expect(nothing.status).toBe(400);
    expect(nothing.json()).toMatchObject({ error: { code: 'missing_required_parameter' } });
    const unknown = await post(url, { model: 'mock-model', previous_response_id: 'resp_nope' });
    expect(unknown.status).toBe(404);
    expect(unknown.json()).toMatchObject({
      error: { code: 'previous_response_not_found', param: 'previous_response_id' },
    });
    const badModel = await post(url, { model: 'nope', input: 'x' });
    expect(badModel.status).toBe(404);
    expect(badModel.json()).toMatchObject({ error: { code: 'model_not_found' } });
    // A compaction item this gateway did not make cannot be read.
    const foreign = await post(`${gateway.url}/v1/responses`, {
      model: 'mock-model',
      input: [{ type: 'compaction', encrypted_content: 'gAAAA-opaque' }],
    });
    expect(foreign.status).toBe(400);
    expect(foreign.json()).toMatchObject({ error: { code: 'invalid_compaction_item' } });
  });

  it('an engine failure is a typed 502, nothing half-made', async () => {
    const { worker, gateway } = await setup();
    const url = `${gateway.url}/v1/responses`;
    const first = (await post(url, { model: 'mock-model', input: 'first question' })).json() as {
      id: string;
    };
    const storedBefore = await (await fetch(`${url}/${first.id}`)).text();
    // Every write the store is asked for from here on.
    const store = gateway.context.store!;
    const writes: string[] = [];
    for (const name of [
      'insertResponse',
      'updateResponse',
      'finishResponse',
      'deleteResponse',
      'insertConversation',
      'appendConversationItems',
    ] as const) {
      const original = store[name].bind(store) as (...args: unknown[]) => Promise<unknown>;
      (store as unknown as Record<string, unknown>)[name] = (...args: unknown[]) => {
        writes.push(name);
        return original(...args);
      };
    }
    worker.setFault('http_500');
    const res = await post(`${url}/compact`, {
      model: 'mock-model',
      input: 'x',
      previous_response_id: first.id,
    });
    expect(res.status).toBe(502);
    expect(res.json()).toMatchObject({ error: { code: 'upstream_http_error', type: 'server_error' } });
    worker.setFault('drop_after:2');
    const dropped = await post(`${url}/compact`, {
      model: 'mock-model',
      input: 'x',
      previous_response_id: first.id,
    });
    expect(dropped.status).toBe(502);
    expect(dropped.json()).toMatchObject({ error: { code: 'upstream_connect_error', type: 'server_error' } });
    // Nothing was written, and the chain it read is as it was.
    expect(writes).toEqual([]);
    expect(await (await fetch(`${url}/${first.id}`)).text()).toBe(storedBefore);
  });
});
