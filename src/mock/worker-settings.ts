import type { GenerationSettings } from './generation-endpoint.js';

/** What a worker's endpoints are set up with (its options, resolved). */
export interface WorkerSettings extends GenerationSettings {
  /** The context length `/v1/models` reports for every model; none when undefined. */
  maxModelLen: number | undefined;
  /** Whether it has vLLM's tokenizer endpoints (`/tokenize`, `/detokenize`); without, they are 404s. */
  tokenizer: boolean;
}
