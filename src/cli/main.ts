#!/usr/bin/env node
import { Command } from 'commander';
import { registerDemo } from './demo.js';
import { registerMockWorker } from './mock-worker.js';
import { registerModel } from './model.js';
import { registerServe } from './serve.js';
import { reportStartupFailure } from './startup.js';
import { registerWorker } from './worker.js';

const program = new Command()
  .name('sluice')
  .description('An LLM model gateway: one OpenAI-compatible front door for a fleet of inference engines.')
  .version('0.1.0')
  .showHelpAfterError();

registerServe(program);
registerMockWorker(program);
registerWorker(program);
registerModel(program);
registerDemo(program);

try {
  await program.parseAsync(process.argv);
} catch (err) {
  // A start that failed is one line and a non-zero exit, never a stack trace.
  process.exit(reportStartupFailure(err));
}
