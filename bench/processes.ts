import { type ChildProcess, spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';

/** The gateway's CLI: the build, or another build to compare (`SLUICE_BENCH_CLI=<path to main.js>`). */
const CLI = process.env.SLUICE_BENCH_CLI ?? new URL('../dist/cli/main.js', import.meta.url).pathname;
const FLOOR_RELAY = new URL('./floor-relay.ts', import.meta.url).pathname;

export interface Proc {
  child: ChildProcess;
  url: string;
  pid: number;
  /** The JSON object of the output line that named the URL (the routing fleet's adds `urls`). */
  line: { url: string; urls?: string[] } & Record<string, unknown>;
}

/** Starts `sluice <args>` from the build and resolves with the URL it prints when listening. */
export function startCli(
  args: string[],
  env: Record<string, string> = {},
  nodeArgs: string[] = [],
): Promise<Proc> {
  return startNode([...nodeArgs, CLI, ...args], env);
}

/**
 * Which floor relay: bare, through fastify, with the duties of a gateway, or with the duties' JSON
 * checks alone (see bench/floor-relay.ts).
 */
export type FloorMode = 'bare' | 'fastify' | 'duties' | 'checks';

/** Starts the floor relay (bench/floor-relay.ts) in front of `upstream`. */
export function startFloorRelay(
  upstream: string,
  nodeArgs: string[] = [],
  mode: FloorMode = 'bare',
): Promise<Proc> {
  return startNode([...nodeArgs, '--import', 'tsx', FLOOR_RELAY, new URL(upstream).origin, mode]);
}

/**
 * Starts a relay to compare, named as the side-by-side benches take it: `floor`, `floor:fastify`,
 * `floor:duties`, `floor:checks` (bench/floor-relay.ts's modes), or a gateway build's `cli/main.js`, possibly after
 * node flags (`'--max-semi-space-size=32 dist/cli/main.js'`), served with `configFile`.
 */
export function startRelay(
  what: string,
  upstream: string,
  configFile: string,
  nodeArgs: string[] = [],
): Promise<Proc> {
  if (what === 'floor' || what.startsWith('floor:')) {
    return startFloorRelay(upstream, nodeArgs, (what.split(':')[1] ?? 'bare') as FloorMode);
  }
  const serve = ['serve', '--port', '0', '--config', configFile, '--log-level', 'info'];
  return startNode([...nodeArgs, ...what.split(' '), ...serve]);
}

/** Where and how long `startNode` waits for the URL. */
export interface StartOptions {
  /** The directory to start in (this process's own by default). */
  cwd?: string;
  /** How long the process has to print its URL. */
  timeoutMs?: number;
}

/**
 * Starts `node <args>` and resolves when it is listening: with the URL of the first whole line
 * of its output that holds one (`"url":"http://..."`), and that line's JSON object.
 */
export function startNode(
  args: string[],
  env: Record<string, string> = {},
  { cwd, timeoutMs = 20_000 }: StartOptions = {},
): Promise<Proc> {
  const child = spawn(process.execPath, args, {
    cwd,
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, ...env },
  });
  return new Promise((resolve, reject) => {
    let output = '';
    const timer = setTimeout(
      () => reject(new Error(`no URL within ${timeoutMs / 1000} s from ${args.join(' ')}: ${output}`)),
      timeoutMs,
    );
    child.stdout!.on('data', (chunk: Buffer) => {
      output += chunk.toString();
      // Whole lines only (the last one may not have arrived in full).
      for (const text of output.split('\n').slice(0, -1)) {
        const match = /"url":"(http:\/\/[^"]+)"/.exec(text);
        if (!match) continue;
        clearTimeout(timer);
        child.stdout!.removeAllListeners('data');
        child.stdout!.resume();
        try {
          const line = JSON.parse(text.slice(text.indexOf('{'))) as Proc['line'];
          resolve({ child, url: match[1]!, pid: child.pid!, line });
        } catch (err) {
          child.kill('SIGKILL');
          reject(
            new Error(`${args.join(' ')} named its URL in a line that is not JSON: ${text}`, { cause: err }),
          );
        }
        return;
      }
    });
    child.stderr!.on('data', (chunk: Buffer) => {
      output += chunk.toString();
    });
    child.once('exit', (code) => reject(new Error(`${args.join(' ')} exited with ${code}: ${output}`)));
  });
}

/** Stops a process: SIGKILL, or SIGTERM to let it exit by itself (and write a CPU profile). */
export async function stop(proc: Proc, signal: 'SIGKILL' | 'SIGTERM' = 'SIGKILL'): Promise<void> {
  if (proc.child.exitCode !== null) return;
  const exited = new Promise((resolve) => proc.child.once('exit', resolve));
  proc.child.kill(signal);
  await exited;
}

const TICKS_PER_SECOND = 100;

/** CPU seconds (user + system) a process has used, from /proc. */
export function cpuSeconds(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) / TICKS_PER_SECOND;
}

/** Resident memory of a process in bytes, from /proc. */
export function rssBytes(pid: number): number {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = /VmRSS:\s+(\d+) kB/.exec(status)?.[1];
  return Number(kb) * 1024;
}
