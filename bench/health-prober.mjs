// Started by bench/hostile.ts in a process of its own (the engines' floods would delay a prober
// that shared their event loop): asks `<url>/health` every 50 ms until stdin closes, then prints
// one JSON line with the answers, the failures, the slowest answer and the times over 250 ms
// (and when the first 20 of those came).
const url = process.argv[2];
let answers = 0;
let failures = 0;
let worstMs = 0;
let over250 = 0;
let running = true;
/** When (seconds since the prober started) each answer past 250 ms came, and how long it took: the first 20. */
const slow = [];
const began = performance.now();
process.stdin.on('end', () => {
  running = false;
});
process.stdin.resume();
// One answer untimed first: a process's first fetch loads and compiles undici, the prober's own cost.
await fetch(`${url}/health`).then(
  (res) => res.arrayBuffer(),
  () => {},
);
while (running) {
  const start = performance.now();
  try {
    const res = await fetch(`${url}/health`, { signal: AbortSignal.timeout(10_000) });
    await res.arrayBuffer();
    if (res.status === 200) answers++;
    else failures++;
  } catch {
    failures++;
  }
  const ms = performance.now() - start;
  worstMs = Math.max(worstMs, ms);
  if (ms > 250) {
    over250++;
    if (slow.length < 20) slow.push({ atS: Math.round((start - began) / 100) / 10, ms: Math.round(ms) });
  }
  await new Promise((resolve) => setTimeout(resolve, 50));
}
console.log(JSON.stringify({ answers, failures, worstMs: Math.round(worstMs), over250, slow }));
