// Loaded into the gateway by bench/hostile.ts (`node --expose-gc --import`): a SIGUSR2 runs a full
// collection, so that "memory after" measures what the process still holds, not garbage V8 has
// not collected yet (an idle heap is not collected until it grows again).
process.on('SIGUSR2', () => {
  globalThis.gc?.();
  globalThis.gc?.();
});
