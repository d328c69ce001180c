// Graceful shutdown: SIGTERM closes the listener and idle or trickling connections, lets running requests finish
// for --drain-timeout, then ends the rest with finish_reason "abort" (every stream gets its final event and
// [DONE], a waiting non-streaming client its response) and exits 0; a second signal does not wait.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { startServer, post } from './harness.mjs';

// A long streaming completion: resolves once its first chunk arrived, then `done` gives its last finish reason
// and whether the stream ended (the client saw [DONE]).
async function longStream(client, model, i) {
  const stream = await client.completions.create({
    model, prompt: `Stream ${i}:`, max_tokens: 8000, ignore_eos: true, temperature: 0.7, seed: i, stream: true,
  });
  const it = stream[Symbol.asyncIterator]();
  const first = await it.next();
  assert.equal(first.done, false);
  const done = (async () => {
    let finish = null;
    let tokens = 0;
    for (let r = await it.next(); !r.done; r = await it.next()) {
      for (const c of r.value.choices) {
        if (c.finish_reason) finish = c.finish_reason;
        if (c.text) tokens += 1;
      }
    }
    return { finish, tokens };
  })();
  return { done };
}

function exited(proc) {
  return new Promise((resolve) => proc.on('exit', (code) => resolve(code)));
}

test('SIGTERM drains, then ends running streams with a final event, and exits', async () => {
  const server = await startServer(['--drain-timeout', '1']);
  const port = Number(new URL(server.base).port);
  const client = server.client();
  const streams = [];
  for (let i = 0; i < 4; ++i) streams.push(await longStream(client, server.model, i));
  const waiting = post(server.base, '/v1/completions', { model: server.model, prompt: 'Whole', max_tokens: 8000, ignore_eos: true });
  // An idle connection and a client trickling a header must not keep the server up.
  const idle = net.connect(port, '127.0.0.1');
  const trickler = net.connect(port, '127.0.0.1');
  for (const s of [idle, trickler]) s.on('error', () => {});
  trickler.write('POST /v1/completions HTTP/1.1\r\n');
  const trickle = setInterval(() => { if (!trickler.destroyed) trickler.write('X'); }, 200);
  await new Promise((r) => setTimeout(r, 300));

  const started = Date.now();
  const code = exited(server.proc);
  server.proc.kill('SIGTERM');
  const results = await Promise.all(streams.map((s) => s.done));
  const whole = await waiting;
  assert.equal(await code, 0);
  clearInterval(trickle);
  const elapsed = Date.now() - started;
  for (const r of results) {
    assert.equal(r.finish, 'abort');
    assert.ok(r.tokens > 0);
  }
  assert.equal(whole.status, 200, whole.text);
  assert.equal(whole.json.choices[0].finish_reason, 'abort');
  assert.ok(whole.json.usage.completion_tokens > 0);
  // 1 s of draining, a step to end the cancelled requests, the exit: far below the 8,000 tokens' time.
  assert.ok(elapsed < 15000, `exit took ${elapsed} ms`);
  assert.match(server.log(), /waiting up to 1 s for \d+ running requests/);
  assert.match(server.log(), /cancelling \d+ running requests/);
  // After the signal nothing new is accepted: the port is closed.
  const refused = await fetch(`${server.base}/health`).then(() => false, () => true);
  assert.ok(refused);
  idle.destroy();
  trickler.destroy();
});

test('requests that finish within the drain time complete normally', async () => {
  const server = await startServer(['--drain-timeout', '60']);
  const client = server.client();
  const stream = await longStream(client, server.model, 7);
  const short = post(server.base, '/v1/completions', { model: server.model, prompt: 'Short', max_tokens: 8, ignore_eos: true });
  await new Promise((r) => setTimeout(r, 100));
  const code = exited(server.proc);
  server.proc.kill('SIGTERM');
  const r = await short;
  assert.equal(r.status, 200);
  assert.equal(r.json.choices[0].finish_reason, 'length');
  // The long stream would take far longer than this test: a second signal ends it at once.
  await new Promise((res) => setTimeout(res, 300));
  server.proc.kill('SIGTERM');
  const s = await stream.done;
  assert.equal(s.finish, 'abort');
  assert.equal(await code, 0);
});
