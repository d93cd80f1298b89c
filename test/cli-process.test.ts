import { once } from 'node:events';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createMockWorker, type MockWorker } from '../src/mock/mock-worker.js';
import { startCli as start } from './helpers/cli.js';
import { chatBody, eventually, sseData } from './helpers/gateway.js';

describe('the CLI as processes', () => {
  let mock: MockWorker;
  beforeAll(async () => {
    mock = await createMockWorker({ tokensPerSecond: 50 });
  });
  afterAll(async () => {
    await mock.close();
  });

  it('mock-worker serves on the port it is given', async () => {
    const proc = start(['mock-worker', '--port', '0', '--model', 'cli-model', '--tokens-per-second', '0']);
    try {
      const url = await proc.url;
      const models = (await (await fetch(`${url}/v1/models`)).json()) as { data: { id: string }[] };
      expect(models.data.map((m) => m.id)).toEqual(['cli-model']);
    } finally {
      proc.child.kill('SIGTERM');
      await once(proc.child, 'exit');
    }
  });

  it('serve drains on SIGTERM: streams past the grace period end with dispatcher_closed', async () => {
    const proc = start(['serve', '--port', '0', '--worker', mock.url], { SLUICE_SHUTDOWN_GRACE_MS: '300' });
    const url = await proc.url;
    const response = await fetch(`${url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(chatBody({ stream: true, max_tokens: 2000 })),
    });
    expect(response.status).toBe(200);
    const text = response.text();
    await eventually(() => mock.stats.inflight === 1);
    const exited = once(proc.child, 'exit');
    proc.child.kill('SIGTERM');
    const events = sseData(await text);
    expect(JSON.parse(events.at(-1)!).error.code).toBe('dispatcher_closed');
    const [code] = await exited;
    expect(code).toBe(0);
    expect(proc.output()).toContain('shutting down');
    await eventually(() => mock.stats.inflight === 0);
  }, 30_000);
});
