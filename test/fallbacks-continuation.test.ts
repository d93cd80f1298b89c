import { describe, expect, it } from 'vitest';
import { PrefillRejected, UpstreamHttpError, upstreamStatusError } from '../src/errors/upstream-errors.js';
import { sequence } from '../src/mock/generate.js';
import type { MockWorker } from '../src/mock/mock-worker.js';
import { BACKUP, fallbackFixture, PRIMARY, TOKENS } from './helpers/fallback-fixture.js';
import { post, sseData } from './helpers/gateway.js';

/**
 * Fallback across models (README "Fallbacks"), a stream cut mid-answer: continued on the fallback
 * where it takes the prefill, typed where none can, on chat, Messages and Responses; a refused
 * prefill is learnt per model (the fixture: test/helpers/fallback-fixture.ts).
 */
describe('fallbacks across models: a cut stream', () => {
  const { fx, setup, chat, streamed } = fallbackFixture();

  it('a stream cut mid-answer with a fallback that takes no prefill ends typed, as without fallbacks', async () => {
    const { primaryWorker, backupWorker, gateway, attempts } = await setup({}, { continuation: false });
    primaryWorker.setFault('reset_after:4', PRIMARY);
    const res = await chat(gateway.url, { stream: true });
    const got = streamed(res.text);
    expect(got.text).toBe(sequence(4));
    expect(got.error?.code).toBe('request_stream_closed');
    expect(got.done).toBe(false);
    expect(attempts(backupWorker)).toBe(0);
    expect(attempts(primaryWorker)).toBe(1);
  });

  it('a fallback whose engine rejects the prefill: the stream ends typed after what was shown, and later cuts are not sent there', async () => {
    const { primaryWorker, backupWorker, gateway } = await setup();
    primaryWorker.setFault('reset_after:4', PRIMARY);
    backupWorker.setFault('reject_prefill', BACKUP);
    for (let cut = 1; cut <= 2; cut++) {
      const got = streamed((await chat(gateway.url, { stream: true })).text);
      expect(got.text).toBe(sequence(4));
      expect(got.error?.code).toBe('request_stream_closed');
      expect(got.done).toBe(false);
      // Its 400 (vLLM's words) was remembered for the model: the second cut never asks it.
      expect(backupWorker.stats.requests, `after cut ${cut}`).toBe(1);
    }
    // Only its prefill is refused: the model still answers its own requests.
    expect((await chat(gateway.url, {}, BACKUP)).status).toBe(200);
  });

  it("a refused prefill is told from the engines' own words in their 400, not from a request's conflicting flags", () => {
    const refusal = (body: unknown) =>
      upstreamStatusError('w', 400, Buffer.from(JSON.stringify(body)), {
        'content-type': 'application/json',
      });
    const said = [
      // vLLM (transformers' apply_chat_template): a template that drops the final message.
      {
        object: 'error',
        type: 'BadRequestError',
        code: 400,
        message:
          'continue_final_message is set but the final message does not appear in the chat after applying the chat template! This can happen if the chat template deletes portions of the final message.',
      },
      // llama.cpp's server, a thinking template.
      {
        error: {
          code: 400,
          message: 'Assistant response prefill is incompatible with enable_thinking.',
          type: 'invalid_request_error',
        },
      },
      // vLLM with a Mistral tokenizer.
      {
        object: 'error',
        code: 400,
        message: 'Cannot set add_generation_prompt to True when the last message is from the assistant',
      },
      // Mistral's validator.
      {
        object: 'error',
        message:
          'Expected last role User or Tool (or Assistant with prefix True) for serving but got assistant',
        code: '3230',
      },
    ];
    for (const body of said) {
      const error = refusal(body);
      expect(error, JSON.stringify(body)).toBeInstanceOf(PrefillRejected);
      expect(error).toMatchObject({ code: 'prefill_rejected', status: 400, retryable: false });
    }
    // The request's own flags set both ways: the client's error, not the template's.
    const flags = refusal({
      object: 'error',
      code: 400,
      message: 'Cannot set both `continue_final_message` and `add_generation_prompt` to True.',
    });
    expect(flags).toBeInstanceOf(UpstreamHttpError);
  });

  it('a prefill rejection is learnt per model: the continuation goes on to the next model, and later cuts go there at once', async () => {
    const THIRD = 'third';
    const [primaryWorker, backupWorker, thirdWorker] = (
      await Promise.all(
        [PRIMARY, BACKUP, THIRD].map((model) => fx.mocks(1, { tokensPerSecond: 0, models: [model] })),
      )
    ).map((w) => w[0]!) as [MockWorker, MockWorker, MockWorker];
    const gateway = await fx.gateway({
      workers: [
        { url: primaryWorker.url, id: 'wp' },
        { url: backupWorker.url, id: 'wb' },
        { url: thirdWorker.url, id: 'wt' },
      ],
      models: { [PRIMARY]: { fallbacks: [BACKUP, THIRD] } },
    });
    primaryWorker.setFault('reset_after:4', PRIMARY);
    backupWorker.setFault('reject_prefill', BACKUP);
    for (let cut = 1; cut <= 3; cut++) {
      const got = streamed((await chat(gateway.url, { stream: true })).text);
      expect(got.error).toBeUndefined();
      expect(got.done).toBe(true);
      expect(got.text).toBe(sequence(TOKENS));
      expect(got.chunks.at(-1)?.model).toBe(THIRD);
      expect([backupWorker.stats.requests, thirdWorker.stats.requests], `after cut ${cut}`).toEqual([1, cut]);
    }
    const asked = thirdWorker.stats.lastBodies.at(-1) as { messages: { role: string; content: string }[] };
    expect(asked.messages.at(-1)).toEqual({ role: 'assistant', content: sequence(4) });
  });

  it('Anthropic Messages: a stream cut mid-answer is finished by the fallback, one message, no error event', async () => {
    const { primaryWorker, backupWorker, gateway } = await setup();
    primaryWorker.setFault('reset_after:4', PRIMARY);
    const res = await post(`${gateway.url}/v1/messages`, {
      model: PRIMARY,
      max_tokens: TOKENS,
      stream: true,
      messages: [{ role: 'user', content: 'hi' }],
    });
    expect(res.status).toBe(200);
    const events = res.text.split('\n\n').filter((b) => b.includes('data: '));
    const data = events.map(
      (b) => JSON.parse(b.slice(b.indexOf('data: ') + 6)) as { type: string; delta?: { text?: string } },
    );
    expect(data.map((d) => d.type)).not.toContain('error');
    expect(data.at(-1)!.type).toBe('message_stop');
    const text = data.map((d) => d.delta?.text ?? '').join('');
    expect(text).toBe(sequence(TOKENS));
    expect(backupWorker.stats.requests).toBe(1);
  });

  it('Responses: the fallback answers a create, and the stored response names the model that answered', async () => {
    const { primaryWorker, gateway } = await setup();
    primaryWorker.setFault('http_503', PRIMARY);
    const res = await post(`${gateway.url}/v1/responses`, {
      model: PRIMARY,
      input: 'hi',
      max_output_tokens: TOKENS,
    });
    expect(res.status).toBe(200);
    const body = res.json() as {
      id: string;
      status: string;
      model: string;
      metadata: Record<string, string>;
    };
    expect(body.status).toBe('incomplete');
    expect(body.model).toBe(BACKUP);
    expect(body.metadata.sluice_models).toBe(BACKUP);
    const stored = (await (await fetch(`${gateway.url}/v1/responses/${body.id}`)).json()) as {
      model: string;
    };
    expect(stored.model).toBe(BACKUP);
  });

  it('Responses: a stream cut mid-answer goes on on the fallback; its metadata lists both models in order', async () => {
    const { primaryWorker, gateway } = await setup();
    primaryWorker.setFault('reset_after:4', PRIMARY);
    const res = await post(`${gateway.url}/v1/responses`, {
      model: PRIMARY,
      input: 'hi',
      max_output_tokens: TOKENS,
      stream: true,
    });
    const events = sseData(res.text).map(
      (d) =>
        JSON.parse(d) as {
          type: string;
          delta?: string;
          response?: { model: string; status: string; metadata: Record<string, string> };
        },
    );
    const terminal = events.at(-1)!;
    expect(terminal.type).toBe('response.incomplete');
    expect(terminal.response!.metadata.sluice_models).toBe(`${PRIMARY},${BACKUP}`);
    expect(terminal.response!.model).toBe(BACKUP);
    const text = events
      .filter((e) => e.type === 'response.output_text.delta')
      .map((e) => e.delta)
      .join('');
    expect(text).toBe(sequence(TOKENS));
  });
});
