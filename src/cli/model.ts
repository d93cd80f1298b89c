import type { Command } from 'commander';
import { writeTinyModel } from '../engine/tiny-model.js';
import { parseIntOption } from './options.js';

export function registerModel(program: Command): void {
  const model = program.command('model').description('Model file utilities.');
  model
    .command('make-tiny')
    .description(
      'Write a tiny random-weight llama model with its own tokenizer (a few hundred KB, for tests).',
    )
    .argument('<out>', 'the .gguf file to write')
    .option(
      '--seed <n>',
      'seed of the random weights; the same seed gives the same bytes',
      parseIntOption(0, 2 ** 32 - 1),
      1,
    )
    .action(async (out: string, flags: { seed: number }) => {
      const { bytes } = await writeTinyModel(out, { seed: flags.seed });
      console.log(JSON.stringify({ msg: 'tiny model written', path: out, bytes, seed: flags.seed }));
    });
}
