/**
 * Where the snapshots come from: the event stream first (SSE), polling `data` as the fallback, and
 * back to the stream after 30 s of successful polling. The admin key of the page's own URL is
 * passed on (`?key=`, since an EventSource cannot set headers).
 */
import { $ } from './dom.js';

type Mode = 'connecting' | 'live' | 'polling' | 'down';

export interface ConnectionHandlers {
  /** A message: a snapshot's JSON (or anything else, from a polled body). */
  onText: (text: string) => void;
  /** Every second. */
  onTick: () => void;
}

const key = new URLSearchParams(location.search).get('key');
const base = location.pathname.replace(/\/+$/, '');
const withKey = (path: string) => (key ? `${path}?key=${encodeURIComponent(key)}` : path);
const eventsUrl = withKey(`${base}/events`);
const dataUrl = withKey(`${base}/data`);

let handlers: ConnectionHandlers = { onText: () => {}, onTick: () => {} };
let es: EventSource | null = null;
let mode: Mode = 'connecting';
let sseStartedAt = 0;
let lastMessageAt = 0;
/** null when not polling; -1 while a poll is under way, else the timer of the next one. */
let pollTimer: number | null = null;
let pollSince = 0;
let pollFailures = 0;

function setConn(state: Mode, text: string): void {
  mode = state;
  $('conn-dot').className =
    `dot ${state === 'live' ? 'ok' : state === 'polling' ? 'warn' : state === 'down' ? 'bad' : ''}`;
  $('conn-state').textContent = text;
}

function startSse(): void {
  if (typeof EventSource === 'undefined') {
    startPolling();
    return;
  }
  stopPolling();
  setConn('connecting', 'connecting');
  sseStartedAt = Date.now();
  lastMessageAt = 0;
  es = new EventSource(eventsUrl);
  es.onmessage = (event: MessageEvent<string>) => {
    lastMessageAt = Date.now();
    if (mode !== 'live') setConn('live', 'live');
    handlers.onText(event.data);
  };
  es.onerror = () => {
    if (!es) return;
    if (es.readyState === EventSource.CLOSED) {
      closeSse();
      startPolling();
    } else setConn('connecting', 'reconnecting');
  };
}

function closeSse(): void {
  if (es) {
    es.onmessage = null;
    es.onerror = null;
    es.close();
  }
  es = null;
}

function startPolling(): void {
  closeSse();
  if (pollTimer !== null) return;
  pollSince = Date.now();
  pollFailures = 0;
  setConn('polling', 'polling');
  poll();
}

function stopPolling(): void {
  if (pollTimer !== null) clearTimeout(pollTimer);
  pollTimer = null;
}

function poll(): void {
  pollTimer = -1;
  const headers: Record<string, string> = key ? { authorization: `Bearer ${key}` } : {};
  fetch(dataUrl, { headers: headers, cache: 'no-store' })
    .then((res) => {
      if (!res.ok) throw new Error(`HTTP ${res.status}`);
      return res.text();
    })
    .then(
      (text) => {
        pollFailures = 0;
        setConn('polling', 'polling');
        handlers.onText(text);
      },
      () => {
        pollFailures++;
        setConn('down', 'disconnected');
      },
    )
    .then(() => {
      if (pollTimer === null) return;
      // Every 30 s of polling, try the event stream again.
      if (pollFailures === 0 && Date.now() - pollSince > 30000) {
        stopPolling();
        startSse();
        return;
      }
      pollTimer = setTimeout(poll, pollFailures === 0 ? 1000 : Math.min(10000, 1000 * 2 ** pollFailures));
    });
}

/** Starts receiving snapshots (once per page). */
export function connect(on: ConnectionHandlers): void {
  handlers = on;
  // An event stream that delivers nothing for 5 s (a buffering proxy, a dead connection) is replaced by polling.
  setInterval(() => {
    handlers.onTick();
    if (es && Date.now() - Math.max(lastMessageAt, sseStartedAt) > 5000) startPolling();
  }, 1000);
  startSse();
}
