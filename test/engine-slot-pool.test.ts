import { describe, expect, it } from 'vitest';
import { SlotPool, SlotWaitAborted } from '../src/engine/slot-pool.js';

describe('SlotPool', () => {
  it('hands out free slots, then serves waiters first come, first served', async () => {
    const pool = new SlotPool(['a', 'b']);
    expect(await pool.acquire()).toBe('a');
    expect(await pool.acquire()).toBe('b');
    const order: string[] = [];
    const first = pool.acquire().then((s) => order.push(`first:${s}`));
    const second = pool.acquire().then((s) => order.push(`second:${s}`));
    expect(pool.waiting).toBe(2);
    pool.release('b');
    pool.release('a');
    await Promise.all([first, second]);
    expect(order).toEqual(['first:b', 'second:a']);
    expect(pool.waiting).toBe(0);
  });

  it('drops a waiter whose signal aborts, and the slot goes to the next one', async () => {
    const pool = new SlotPool(['a']);
    await pool.acquire();
    const controller = new AbortController();
    const dropped = pool.acquire(controller.signal);
    const next = pool.acquire();
    controller.abort();
    await expect(dropped).rejects.toBeInstanceOf(SlotWaitAborted);
    expect(pool.waiting).toBe(1);
    pool.release('a');
    expect(await next).toBe('a');
  });

  it('fails every waiter when it closes', async () => {
    const pool = new SlotPool(['a']);
    await pool.acquire();
    const waiting = pool.acquire();
    pool.close();
    await expect(waiting).rejects.toThrow(/closing/);
    await expect(pool.acquire()).rejects.toThrow(/closing/);
  });
});
