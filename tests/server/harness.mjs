// Starts `tide serve` on a free loopback port with the tiny fixture model on the CPU and waits for /health.
// TIDE_BINARY names the tide program (ctest sets it); the default is the build folder's.
import { spawn } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import fs from 'node:fs';
import OpenAI from 'openai';

const here = path.dirname(fileURLToPath(import.meta.url));
export const repoRoot = path.resolve(here, '..', '..');
export const modelDir = path.join(repoRoot, 'tests', 'fixtures', 'cohere2-tiny');
export const golden = JSON.parse(fs.readFileSync(path.join(modelDir, 'golden.json'), 'utf8'));
export const binary = process.env.TIDE_BINARY || path.join(repoRoot, 'build', 'apps', 'tide', 'tide');

// `options.model`: another model folder; `options.program`: another program and the arguments before `serve`
// (the scripted test double: [TIDE_SCRIPTED_BINARY, '--script', file]).
export async function startServer(extraArgs = [], options = {}) {
  const model = options.model || modelDir;
  const [program, ...before] = options.program || [binary];
  const args = [...before, 'serve', model, '--host', '127.0.0.1', '--port', '0', '--device', 'cpu', ...extraArgs];
  const proc = spawn(program, args, { stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  const port = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`tide serve did not start:\n${log}`)), 30000);
    proc.stderr.on('data', (chunk) => {
      log += chunk.toString();
      const m = log.match(/listening on http:\/\/127\.0\.0\.1:(\d+)/);
      if (m) {
        clearTimeout(timer);
        resolve(Number(m[1]));
      }
    });
    proc.on('exit', (code) => reject(new Error(`tide serve exited with ${code}:\n${log}`)));
  });
  const base = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 60000;
  for (;;) {
    const res = await fetch(`${base}/health`).catch(() => null);
    if (res && res.status === 200) break;
    if (Date.now() > deadline) throw new Error(`/health never answered 200:\n${log}`);
    await new Promise((r) => setTimeout(r, 100));
  }
  const server = {
    base,
    model,
    proc,
    log: () => log,
    client: (options = {}) => new OpenAI({ baseURL: `${base}/v1`, apiKey: 'unused', maxRetries: 0, ...options }),
    async stop() {
      if (proc.exitCode !== null) return proc.exitCode;
      const exited = new Promise((resolve) => proc.on('exit', (code) => resolve(code)));
      proc.kill('SIGTERM');
      return exited;
    },
  };
  return server;
}

// POSTs `body` (a string is sent as is) and returns {status, json}.
export async function post(base, route, body, headers = {}) {
  const res = await fetch(`${base}${route}`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', ...headers },
    body: typeof body === 'string' || body instanceof Uint8Array ? body : JSON.stringify(body),
  });
  const text = await res.text();
  let json = null;
  try {
    json = JSON.parse(text);
  } catch {
    json = null;
  }
  return { status: res.status, json, text };
}

// The value of a /metrics series, e.g. metric(text, 'tide_kv_cache_blocks_in_use', 'group="3",window="global"').
export function metricValues(text, name) {
  const out = {};
  for (const line of text.split('\n')) {
    if (line.startsWith('#')) continue;
    const m = line.match(/^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$/);
    if (m && m[1] === name) out[m[2] || ''] = Number(m[3]);
  }
  return out;
}

// Waits until the server at `base` runs and queues no request and no layer group holds a KV block (the
// blocks of every finished or cancelled request are back); returns the last /metrics text.
export async function waitForIdle(base, timeoutMs = 30000, headers = {}) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const text = await (await fetch(`${base}/metrics`, { headers })).text();
    const inUse = Object.values(metricValues(text, 'tide_kv_cache_blocks_in_use'));
    const running = metricValues(text, 'tide_num_requests_running')[''];
    const waiting = metricValues(text, 'tide_num_requests_waiting')[''];
    if (inUse.length > 0 && inUse.every((v) => v === 0) && running === 0 && waiting === 0) return text;
    if (Date.now() > deadline) throw new Error(`the server never went idle:\n${text}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}
