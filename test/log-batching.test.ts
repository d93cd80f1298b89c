import { spawn } from 'node:child_process';
import { describe, expect, it } from 'vitest';

/**
 * The gateway's stdout log is written in batches (src/observability/logger.ts). What a reader of
 * that log gets, from a real process: every line whole, in order, its UTF-8 intact, when the
 * process exits at once after writing, and when it is killed with -9 a second after its last line
 * (the flush timer wrote them).
 */
function runWriter(
  lines: number,
  then: 'exit' | 'idle',
): Promise<{ stdout: string; code: number | null; signal: NodeJS.Signals | null }> {
  return new Promise((resolve, reject) => {
    const child = spawn(
      process.execPath,
      ['--import', 'tsx', 'test/helpers/log-writer.ts', String(lines), then],
      {
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    const out: Buffer[] = [];
    child.stdout.on('data', (chunk: Buffer) => out.push(chunk));
    child.stderr.on('data', (chunk: Buffer) => {
      // Killed 1.5 s after its last line: past the 1 s flush, well short of a second flush.
      if (chunk.toString().includes('written')) setTimeout(() => child.kill('SIGKILL'), 1_500);
    });
    child.on('error', reject);
    child.on('close', (code, signal) =>
      resolve({ stdout: Buffer.concat(out).toString('utf8'), code, signal }),
    );
  });
}

function expectAllLines(stdout: string, lines: number): void {
  expect(stdout.endsWith('\n')).toBe(true);
  const parsed = stdout
    .trimEnd()
    .split('\n')
    .map((line) => JSON.parse(line) as { seq: number; model: string; pad: string; msg: string });
  expect(parsed.map((p) => p.seq)).toEqual(Array.from({ length: lines }, (_, i) => i));
  for (const p of parsed) {
    expect(p.model).toBe('модель-é-模型-🚀');
    expect(p.pad).toBe('x'.repeat(p.seq % 700));
    expect(p.msg).toBe('request ended');
  }
}

describe('the batched stdout log', () => {
  it('holds every line, whole and in order, when the process exits right after writing 5,000', async () => {
    const { stdout, code } = await runWriter(5_000, 'exit');
    expect(code).toBe(0);
    expectAllLines(stdout, 5_000);
  }, 30_000);

  it('has written every line within a second, so a kill -9 after that loses none', async () => {
    const { stdout, signal } = await runWriter(300, 'idle');
    expect(signal).toBe('SIGKILL');
    expectAllLines(stdout, 300);
  }, 30_000);
});
