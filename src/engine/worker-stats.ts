export interface LlamaWorkerStats {
  /** Generation, embeddings and tokenizer requests received, valid or not. */
  requests: number;
  /** Requests holding a slot. */
  inflight: number;
  /** Requests waiting for a slot. */
  queued: number;
  /** Requests whose client went away (or that the worker's close cut) before the end. */
  aborted: number;
  completed: number;
  /** Requests answered with an error. */
  failed: number;
}
