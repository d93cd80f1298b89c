import { lookup } from 'node:dns/promises';
import { BlockList, isIP, type LookupFunction } from 'node:net';

/**
 * The addresses an MCP server URL may not lead to unless the operator names its host itself in
 * `mcp.allowedServers`: loopback, link-local, the cloud metadata address and unspecified, in
 * IPv4 and IPv6, and their IPv4-mapped and IPv4-compatible IPv6 forms. The gateway's own admin
 * API and metrics, a worker's control endpoints and the cloud's credentials live there.
 */
const KINDS: [kind: string, rules: [address: string, prefix: number, family: 'ipv4' | 'ipv6'][]][] = [
  [
    'cloud metadata',
    [
      ['169.254.169.254', 32, 'ipv4'],
      ['fd00:ec2::254', 128, 'ipv6'],
    ],
  ],
  [
    'loopback',
    [
      ['127.0.0.0', 8, 'ipv4'],
      ['::1', 128, 'ipv6'],
    ],
  ],
  [
    'link-local',
    [
      ['169.254.0.0', 16, 'ipv4'],
      ['fe80::', 10, 'ipv6'],
    ],
  ],
  [
    'unspecified',
    [
      ['0.0.0.0', 8, 'ipv4'],
      ['::', 128, 'ipv6'],
    ],
  ],
];

const LISTS = KINDS.map(([kind, rules]) => {
  const list = new BlockList();
  // node's BlockList matches IPv4-mapped IPv6 addresses (::ffff:a.b.c.d) against IPv4 rules itself.
  for (const [address, prefix, family] of rules) list.addSubnet(address, prefix, family);
  return [kind, list] as const;
});

/** IPv4-compatible IPv6 (::a.b.c.d, deprecated): the IPv4 address in its last 32 bits. */
function embeddedIpv4(address: string): string | undefined {
  const match = /^::(?:ffff:(?:0:)?)?([0-9a-f]{1,4}):([0-9a-f]{1,4})$/i.exec(address);
  if (match) {
    const high = Number.parseInt(match[1]!, 16);
    const low = Number.parseInt(match[2]!, 16);
    return `${high >> 8}.${high & 255}.${low >> 8}.${low & 255}`;
  }
  const dotted = /^::(?:ffff:(?:0:)?)?(\d+\.\d+\.\d+\.\d+)$/i.exec(address);
  return dotted?.[1];
}

/** The kind of special address `address` is (an IP literal), or undefined for any other. */
export function specialAddressKind(address: string): string | undefined {
  const bare = address.replace(/^\[|\]$/g, '').replace(/%.*$/, '');
  const family = isIP(bare);
  if (family === 0) return undefined;
  const v4 = family === 6 ? embeddedIpv4(bare) : undefined;
  for (const [kind, list] of LISTS) {
    if (list.check(bare, family === 4 ? 'ipv4' : 'ipv6')) return kind;
    if (v4 !== undefined && isIP(v4) === 4 && list.check(v4, 'ipv4')) return kind;
  }
  return undefined;
}

/** The addresses of an MCP server's host that were checked: its connections go there and nowhere else. */
export interface CheckedTarget {
  addresses: { address: string; family: 4 | 6 }[];
}

/** What resolving a server's host gave: the address to connect to, or the kind of address refused. */
export type Resolution = { ok: true; target: CheckedTarget } | { ok: false; kind: string };

/**
 * Resolves the host of `url` (every address it has) and checks each one: a host that has any
 * special address is refused unless `named` (the operator named the host itself). Throws the
 * resolver's error when the host does not resolve.
 */
export async function resolveServer(url: URL, named: boolean): Promise<Resolution> {
  const host = url.hostname.replace(/^\[|\]$/g, '');
  const family = isIP(host);
  const addresses =
    family !== 0
      ? [{ address: host, family: family as 4 | 6 }]
      : (await lookup(host, { all: true, verbatim: true })).map((a) => ({
          address: a.address,
          family: a.family as 4 | 6,
        }));
  if (!named) {
    for (const { address } of addresses) {
      const kind = specialAddressKind(address);
      if (kind !== undefined) return { ok: false, kind };
    }
  }
  if (addresses.length === 0) throw new Error(`The host ${host} has no address.`);
  return { ok: true, target: { addresses } };
}

/**
 * A `lookup` for net.connect that answers the checked addresses whatever the name: a connection
 * goes to an address that was checked, never to what a second resolution (DNS rebinding) gives.
 */
export function pinnedLookup(target: CheckedTarget): LookupFunction {
  const first = target.addresses[0]!;
  return (_hostname, options, callback) => {
    if ((options as { all?: boolean }).all === true)
      (callback as (err: null, addresses: { address: string; family: number }[]) => void)(
        null,
        target.addresses.map((a) => ({ ...a })),
      );
    else callback(null, first.address, first.family);
  };
}

/** A URL's origin, for logs (its path and query may carry secrets). */
export function originOf(url: string): string {
  try {
    return new URL(url).origin;
  } catch {
    return '(invalid)';
  }
}
