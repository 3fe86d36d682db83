// node-redlock (npm `redlock`, with `ioredis` clients) as a peer of redmutex on the same names,
// driven by tests/suite/interop.rs over its stdin and stdout.
//
//   node peer.js standalone URL...   one ioredis client per URL, each a member of the quorum
//   node peer.js cluster URL         one ioredis Cluster seeded with URL: a single member
//
// Requests, one a line: `lock HEX` and `unlock HEX`, the name's UTF-8 bytes in hex (so that any
// name travels unchanged). Replies, one a line: `ready` once connected, `ok VALUE` (the value
// node-redlock wrote), `ok`, or `fail MESSAGE`. A single attempt per lock (retryCount 0): the
// test asks whether the name is free now, not whether it becomes free within node-redlock's
// default retry budget.
'use strict';

const readline = require('readline');
const Redis = require('ioredis');
const Redlock = require('redlock');

function fail(message) {
    process.stderr.write(`peer.js: ${message}\n`);
    process.exit(2);
}

const [mode, ...urls] = process.argv.slice(2);
if (!['standalone', 'cluster'].includes(mode) || urls.length === 0) {
    fail('usage: node peer.js standalone URL... | node peer.js cluster URL');
}

// Connected before the first request (lazyConnect, then connect()), and no retry of a failed
// request: a node that cannot be reached is an error now, as it is to the test.
const options = { maxRetriesPerRequest: 0, lazyConnect: true };
let clients;
if (mode === 'standalone') {
    clients = urls.map((url) => new Redis(url, options));
} else {
    const seed = new URL(urls[0]);
    clients = [new Redis.Cluster([{ host: seed.hostname, port: Number(seed.port) }], {
        lazyConnect: true,
        redisOptions: { maxRetriesPerRequest: 0 },
    })];
}

const redlock = new Redlock(clients, { retryCount: 0, retryDelay: 10, retryJitter: 0 });
const errors = [];
redlock.on('clientError', (error) => errors.push(String(error)));
const held = new Map();
// How long node-redlock's locks live: longer than any test.
const TTL = 30000;

function reply(line) {
    process.stdout.write(`${line.replace(/\n/g, ' ')}\n`);
}

function failure(error) {
    const clients = errors.length ? ` (client errors: ${errors.join('; ')})` : '';
    return `fail ${error.name}: ${error.message}${clients}`;
}

async function handle(line) {
    errors.length = 0;
    const [op, hex, extra] = line.split(' ');
    if (hex === undefined || extra !== undefined || !/^([0-9a-f]{2})+$/.test(hex)) {
        return `fail not a request: ${line}`;
    }
    const name = Buffer.from(hex, 'hex').toString('utf8');
    if (op === 'lock') {
        try {
            const lock = await redlock.lock(name, TTL);
            held.set(name, lock);
            return `ok ${lock.value}`;
        } catch (error) {
            return failure(error);
        }
    }
    if (op === 'unlock') {
        const lock = held.get(name);
        if (!lock) return `fail no lock held on ${name}`;
        try {
            await lock.unlock();
            held.delete(name);
            return 'ok';
        } catch (error) {
            return failure(error);
        }
    }
    return `fail unknown request: ${line}`;
}

async function main() {
    try {
        await Promise.all(clients.map((client) => client.connect()));
    } catch (error) {
        fail(`could not connect (${mode} ${urls.join(' ')}): ${error}`);
    }
    reply('ready');
    // One request at a time, in order: the test waits for each reply before the next step.
    const lines = readline.createInterface({ input: process.stdin });
    for await (const line of lines) {
        reply(await handle(line));
    }
    await Promise.all(clients.map((client) => client.quit().catch(() => {})));
}

main();
