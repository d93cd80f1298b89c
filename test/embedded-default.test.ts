import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { existsSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import { describe, expect, it } from 'vitest';

/** `sluice serve` with no worker: the embedded local engine on the tiny model, made on first run. */
describe('the embedded default', () => {
  it('serves streamed tokens from the tiny real model with no configuration', {
    timeout: 90_000,
  }, async () => {
    const dataDir = mkdtempSync(join(tmpdir(), 'sluice-embedded-'));
    const child = spawn(process.execPath, ['--import', 'tsx', 'src/cli/main.ts', 'serve', '--port', '0'], {
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, SLUICE_DATA_DIR: dataDir },
    });
    let output = '';
    child.stderr!.on('data', (c: Buffer) => {
      output += c.toString();
    });
    const url = await new Promise<string>((resolve, reject) => {
      child.stdout!.on('data', (c: Buffer) => {
        output += c.toString();
        const match = /"url":"(http:\/\/[^"]+)","workers"/.exec(output);
        if (match) resolve(match[1]!);
      });
      child.once('exit', (code) => reject(new Error(`exited ${code}: ${output}`)));
    });
    try {
      expect(output).toContain('TINY DEMO MODEL');
      expect(existsSync(join(dataDir, 'models', 'sluice-tiny.gguf'))).toBe(true);
      const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'x', maxRetries: 0 });
      const stream = await client.chat.completions.create({
        model: 'sluice-tiny',
        messages: [{ role: 'user', content: 'hello' }],
        stream: true,
        max_tokens: 12,
        stream_options: { include_usage: true },
      });
      let text = '';
      let finish: string | null = null;
      let usage: OpenAI.CompletionUsage | undefined;
      for await (const chunk of stream) {
        text += chunk.choices[0]?.delta.content ?? '';
        finish = chunk.choices[0]?.finish_reason ?? finish;
        usage = chunk.usage ?? usage;
      }
      expect(text.length).toBeGreaterThan(0);
      expect(finish).toBe('length');
      expect(usage?.completion_tokens).toBe(12);
    } finally {
      const exited = once(child, 'exit');
      child.kill('SIGTERM');
      await exited;
    }
  });
});
