// The HTTP layer under hostile connections: idle and slow-trickling clients do not delay normal requests,
// pipelined requests are answered in order on one connection, body limits hold for chunked bodies, conflicting
// Content-Length headers are refused, and every malformed request leaves an access-log line with its status.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { startServer, post } from './harness.mjs';

let server;
let port;
before(async () => {
  server = await startServer(['--timeout-request-header', '4']);
  port = Number(new URL(server.base).port);
});
after(async () => {
  assert.equal(await server.stop(), 0);
});

function connect() {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1', () => resolve(socket));
    socket.on('error', reject);
  });
}

// Sends `bytes` on a fresh connection and collects what comes back until the server closes it (or `ms` pass).
async function exchange(bytes, ms = 10000) {
  const socket = await connect();
  let received = '';
  const closed = new Promise((resolve) => {
    const timer = setTimeout(() => {
      socket.destroy();
      resolve();
    }, ms);
    socket.on('data', (d) => { received += d.toString('latin1'); });
    socket.on('close', () => {
      clearTimeout(timer);
      resolve();
    });
    socket.on('error', () => {});
  });
  socket.write(bytes);
  await closed;
  return received;
}

function statuses(text) {
  return [...text.matchAll(/HTTP\/1\.1 (\d{3}) /g)].map((m) => Number(m[1]));
}

test('1,000 idle and 500 trickling connections do not delay 32 normal requests', async () => {
  const idle = [];
  const trickling = [];
  for (let i = 0; i < 1000; ++i) idle.push(await connect());
  for (let i = 0; i < 500; ++i) {
    const s = await connect();
    s.on('error', () => {});
    s.write('POST /v1/completions HTTP/1.1\r\n');
    trickling.push(s);
  }
  const trickle = setInterval(() => {
    for (const s of trickling) if (!s.destroyed) s.write('X');
  }, 1000);
  try {
    const started = Date.now();
    const results = await Promise.all(Array.from({ length: 32 }, (_, i) =>
      post(server.base, '/v1/completions', { model: server.model, prompt: `Hello ${i}`, max_tokens: 4, ignore_eos: true })));
    const elapsed = Date.now() - started;
    for (const r of results) {
      assert.equal(r.status, 200, r.text);
      assert.equal(r.json.choices[0].finish_reason, 'length');
    }
    // The old thread-per-connection server made such requests wait 40-90 s; an answer inside the header
    // timeout (4 s here, the trickling clients' deadline) shows nothing waited for them.
    assert.ok(elapsed < 4000 * 3, `32 requests took ${elapsed} ms`);
  } finally {
    clearInterval(trickle);
  }
  // The trickling clients never finish a header: the server drops them at the header deadline.
  await new Promise((r) => setTimeout(r, 4500));
  const open = trickling.filter((s) => !s.destroyed && s.readyState === 'open').length;
  for (const s of [...idle, ...trickling]) s.destroy();
  assert.ok(open < 500, `${open} trickling connections still open after the header deadline`);
  assert.match(server.log(), /"- -" 408 \(header not complete in time\)|"POST \/v1\/completions" 408/);
});

test('pipelined requests are each answered, in order, on one connection', async () => {
  const body = (text) => JSON.stringify({ model: server.model, prompt: text });
  const req = (text) => `POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n` +
    `Content-Length: ${Buffer.byteLength(body(text))}\r\n\r\n${body(text)}`;
  const last = 'GET /version HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n';
  const text = await exchange(req('a') + req('a b c') + req('a b c d e f') + last);
  assert.deepEqual(statuses(text), [200, 200, 200, 200]);
  const counts = [...text.matchAll(/"count":(\d+)/g)].map((m) => Number(m[1]));
  assert.equal(counts.length, 3);
  assert.ok(counts[0] < counts[1] && counts[1] < counts[2], `counts ${counts}`);
  assert.match(text, /"version"/);
});

test('a streamed reply with a pipelined request behind it completes, then the next is answered', async () => {
  // With the next request already buffered nothing watches the socket while the stream waits for tokens: the
  // connection must stay alive by itself until its reply ends.
  const body = JSON.stringify({ model: server.model, prompt: 'Stream', max_tokens: 16, ignore_eos: true, stream: true });
  const text = await exchange(`POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n` +
    `Content-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}` +
    'GET /version HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
  assert.deepEqual(statuses(text), [200, 200]);
  assert.match(text, /data: \[DONE\]\n\n\r\n0\r\n\r\nHTTP\/1\.1 200 OK/);
  assert.equal((text.match(/"finish_reason":"length"/g) || []).length, 1);
  assert.match(text, /"version"/);
});

test('256 streams on fresh connections each end with [DONE]', async () => {
  const body = JSON.stringify({ model: server.model, prompt: 'x', max_tokens: 8, ignore_eos: true, stream: true });
  const request = `POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n` +
    `Content-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`;
  const texts = await Promise.all(Array.from({ length: 256 }, () => exchange(request)));
  const broken = texts.filter((t) => !t.endsWith('data: [DONE]\n\n\r\n0\r\n\r\n'));
  assert.equal(broken.length, 0, broken.slice(0, 2).join('\n---\n'));
});

test('a chunked body over the limit gets 413 before it is read in full', async () => {
  const socket = await connect();
  let received = '';
  let sent = 0;
  let closed = false;
  socket.on('data', (d) => { received += d.toString('latin1'); });
  socket.on('error', () => {});
  const done = new Promise((resolve) => socket.on('close', () => { closed = true; resolve(); }));
  socket.write('POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n' +
    'Transfer-Encoding: chunked\r\n\r\n');
  const chunk = Buffer.alloc(1 << 20, 0x20);
  const head = Buffer.from(`${chunk.length.toString(16)}\r\n`);
  // Up to 256 MiB, waiting for the socket to drain; the server's answer stops it long before.
  while (!closed && sent < (256 << 20) && !received.includes('\r\n\r\n')) {
    const ok = socket.write(Buffer.concat([head, chunk, Buffer.from('\r\n')]));
    sent += chunk.length;
    if (!ok) await Promise.race([new Promise((r) => socket.once('drain', r)), done]);
  }
  await Promise.race([done, new Promise((r) => setTimeout(r, 5000))]);
  socket.destroy();
  assert.deepEqual(statuses(received), [413]);
  assert.match(received, /larger than 33554432 bytes/);
  assert.ok(sent < (64 << 20), `${sent} bytes were sent before the refusal`);
});

test('differing Content-Length headers, malformed requests and huge headers are refused and logged', async () => {
  const conflict = await exchange('POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n' +
    'Content-Length: 6\r\n\r\n{"a":1}');
  assert.deepEqual(statuses(conflict), [400]);
  assert.match(conflict, /Content-Length headers that differ/);
  const garbage = await exchange('NOT HTTP AT ALL\r\n\r\n');
  assert.deepEqual(statuses(garbage), [400]);
  const huge = await exchange(`GET /health HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(100000)}\r\n\r\n`);
  assert.deepEqual(statuses(huge), [431]);
  // Every access line names method, path and status; requests whose line never parsed show "- -".
  const lines = server.log().split('\n').filter((l) => / "[^"]*" \d{3}/.test(l));
  assert.ok(lines.length > 0);
  for (const line of lines) assert.match(line, /\d+\.\d+\.\d+\.\d+:\d+ "(\S+ \S+|- -)" \d{3}/, line);
  assert.match(server.log(), /"POST \/tokenize" 400/);
});

test('Expect: 100-continue gets its interim answer, then the reply', async () => {
  const body = JSON.stringify({ model: server.model, prompt: 'hi' });
  const socket = await connect();
  let received = '';
  socket.on('data', (d) => { received += d.toString('latin1'); });
  socket.write(`POST /tokenize HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Type: application/json\r\n` +
    `Content-Length: ${body.length}\r\nConnection: close\r\n\r\n`);
  const deadline = Date.now() + 5000;
  while (!received.includes('100 Continue') && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
  socket.write(body);
  await new Promise((r) => socket.on('close', r));
  assert.deepEqual(statuses(received), [100, 200]);
});
