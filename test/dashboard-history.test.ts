import { describe, expect, it } from 'vitest';
import { chatBody, perTest, post } from './helpers/gateway.js';

/**
 * The dashboard records its history all the time, so the plots are full when the page opens,
 * and a snapshot says which process it comes from.
 */
describe('dashboard history without a viewer', () => {
  const fixture = perTest();

  it('rates recorded while nobody watched are in the first snapshot a viewer gets', async () => {
    const [worker] = await fixture.mocks(1, { tokensPerSecond: 0 });
    const gateway = await fixture.gateway({ workers: [{ url: worker!.url }] });
    // Nobody has opened the page: traffic for a few seconds.
    const started = Date.now();
    const until = started + 3_500;
    while (Date.now() < until) {
      await post(`${gateway.url}/v1/chat/completions`, chatBody({ stream: true }));
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    const snapshot = (await (await fetch(`${gateway.url}/dashboard/data`)).json()) as {
      series: { t: number[]; models: { model: string; rps: (number | null)[] }[] };
      gateway: { pid: number; processes: number };
      intervalMs: number;
    };
    // A point per tick from before the first look (as many as the time that passed holds, less
    // the tick in progress), with a rate in them.
    const ticks = Math.floor((Date.now() - started) / snapshot.intervalMs);
    expect(ticks).toBeGreaterThanOrEqual(3);
    expect(snapshot.series.t.length).toBeGreaterThanOrEqual(ticks - 1);
    const rps = snapshot.series.models
      .find((m) => m.model === 'mock-model')!
      .rps.filter((v): v is number => v !== null && v > 0);
    expect(rps.length).toBeGreaterThanOrEqual(2);
    expect(snapshot.gateway.pid).toBe(process.pid);
    expect(snapshot.gateway.processes).toBe(1);
  });

  it('the history grows with nobody watching: the first look already has points', async () => {
    const [worker] = await fixture.mocks(1);
    const gateway = await fixture.gateway({ workers: [{ url: worker!.url }] });
    // No poll, no subscriber: a timer that ran only while watched would have nothing yet.
    const started = Date.now();
    await new Promise((resolve) => setTimeout(resolve, 2_600));
    const first = (await (await fetch(`${gateway.url}/dashboard/data`)).json()) as {
      series: { t: number[] };
      intervalMs: number;
    };
    const ticks = Math.floor((Date.now() - started) / first.intervalMs);
    expect(ticks).toBeGreaterThanOrEqual(2);
    expect(first.series.t.length).toBeGreaterThanOrEqual(ticks);
  });
});
