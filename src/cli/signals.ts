/**
 * Runs `onStop` on the first SIGTERM/SIGINT; a second signal exits at once, unless `repeat` is
 * `ignore` (a cluster process: Ctrl-C reaches it and its primary, which then sends SIGTERM).
 */
export function onTermination(
  onStop: (signal: NodeJS.Signals) => Promise<void>,
  repeat: 'exit' | 'ignore' = 'exit',
): void {
  let stopping = false;
  const handler = (signal: NodeJS.Signals) => {
    if (stopping) {
      if (repeat === 'exit') process.exit(1);
      return;
    }
    stopping = true;
    onStop(signal).then(
      () => process.exit(0),
      (err: unknown) => {
        console.error(err);
        process.exit(1);
      },
    );
  };
  process.on('SIGTERM', handler);
  process.on('SIGINT', handler);
}
