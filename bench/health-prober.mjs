// Started by bench/hostile.ts in a process of its own (the engines' floods would delay a prober
// that shared their event loop): asks `<url>/health` every 50 ms until stdin closes, then prints
// one JSON line with the answers, the failures, the slowest answer and the times over 250 ms.
const url = process.argv[2];
let answers = 0;
let failures = 0;
let worstMs = 0;
let over250 = 0;
let running = true;
process.stdin.on('end', () => {
  running = false;
});
process.stdin.resume();
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
  if (ms > 250) over250++;
  await new Promise((resolve) => setTimeout(resolve, 50));
}
console.log(JSON.stringify({ answers, failures, worstMs: Math.round(worstMs), over250 }));
