/**
 * A turn of the event loop for work done a slice at a time (joining a long response's events,
 * sending them to the storage thread): one slice of all such work a turn, process-wide, so that
 * twenty responses ending at once (a full budget ends them together) do not run twenty slices in
 * one `setImmediate` phase while every stream and `/health` wait. Written here because Node's
 * scheduler has no such queue: `setImmediate` runs every callback queued before its phase.
 */
const waiting: Array<() => void> = [];
let scheduled = false;

function runOne(): void {
  scheduled = false;
  const next = waiting.shift();
  if (waiting.length > 0) {
    scheduled = true;
    setImmediate(runOne);
  }
  next?.();
}

/** Resolves at a later turn of the event loop, after the slices queued before it. */
export function nextTurn(): Promise<void> {
  return new Promise((resolve) => {
    waiting.push(resolve);
    if (!scheduled) {
      scheduled = true;
      setImmediate(runOne);
    }
  });
}
