// The Chrome JSON that record/ writes, loaded by a real importer offline: Chromium DevTools' own
// trace engine (the Performance panel's), in headless Chromium, driven over the DevTools protocol
// on a pipe (--remote-debugging-pipe: no port, no polling).
//   node record_devtools_check.mjs RECORD_DEMO
// record_demo writes a synthetic two-thread trace; DevTools must see both threads by name, every
// call as a slice (the parse() calls that threw as slices too: "B" events), nested under their
// callers (20 roots per thread: the handle() calls). Exit 77 (skipped) without Chromium or when
// this Chromium's DevTools has no trace engine module to load.
import {execFileSync, spawn} from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const SKIP = 77;
const demo = process.argv[2];
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'probecost-devtools-'));
let chromium = null, exited = null;
function cleanup() {
  try {
    fs.rmSync(tmp, {recursive: true, force: true, maxRetries: 10});
  } catch (e) {
    console.log(`left ${tmp}: ${e.message}`);
  }
}
// Chromium is closed through the protocol, so that it ends its own helper processes (a kill
// leaves them writing into the profile being removed), and waited for.
async function finish(code, message) {
  if (message) console.log(message);
  if (chromium && chromium.exitCode === null) {
    chromium.stdio[3].write(JSON.stringify({id: 0, method: 'Browser.close'}) + '\0');
    await exited;
  }
  cleanup();
  process.exit(code);
}
setTimeout(() => {
  console.log('timed out');
  if (chromium) chromium.kill('SIGKILL');
  cleanup();
  process.exit(1);
}, 90_000).unref();

execFileSync(demo, [tmp], {stdio: 'ignore'});
const trace = JSON.parse(fs.readFileSync(path.join(tmp, 'example.json'), 'utf8'));

chromium = spawn('chromium', ['--headless=new', '--no-sandbox', '--disable-gpu',
                              '--remote-debugging-pipe', `--user-data-dir=${tmp}/profile`,
                              'about:blank'],
                 {stdio: ['ignore', 'ignore', 'ignore', 'pipe', 'pipe']});
exited = new Promise(resolve => chromium.on('exit', resolve));
chromium.on('error', e => {
  cleanup();
  console.log(`skipped: chromium: ${e.message}`);
  process.exit(SKIP);
});

// The protocol on the pipe: JSON messages, each ended by a NUL byte.
let nextId = 0, buffered = '';
const replies = new Map(), waiters = [];
chromium.stdio[4].on('data', chunk => {
  buffered += chunk.toString();
  let end;
  while ((end = buffered.indexOf('\0')) >= 0) {
    const msg = JSON.parse(buffered.slice(0, end));
    buffered = buffered.slice(end + 1);
    if (replies.has(msg.id)) replies.get(msg.id)(msg), replies.delete(msg.id);
    for (const w of waiters) if (w.method === msg.method) w.resolve(msg);
  }
});
const send = (method, params = {}, sessionId) => new Promise(resolve => {
  const id = ++nextId;
  replies.set(id, resolve);
  chromium.stdio[3].write(JSON.stringify({id, method, params, sessionId}) + '\0');
});
const event = method => new Promise(resolve => waiters.push({method, resolve}));

const {result: {targetId}} = await send('Target.createTarget', {url: 'about:blank'});
const {result: {sessionId}} = await send('Target.attachToTarget', {targetId, flatten: true});
await send('Page.enable', {}, sessionId);
const loaded = event('Page.loadEventFired');
await send('Page.navigate', {url: 'devtools://devtools/bundled/devtools_app.html'}, sessionId);
await loaded;

const expression = `(async () => {
  let T;
  try { T = await import('./models/trace/trace.js'); } catch (e) { return {skip: String(e)}; }
  if (!T.TraceModel?.Model?.createWithAllHandlers) return {skip: 'no TraceModel.Model'};
  const model = T.TraceModel.Model.createWithAllHandlers();
  await model.parse(${JSON.stringify(trace.traceEvents)}, {metadata: {}, isFreshRecording: false});
  const parsed = model.parsedTrace(0);
  const renderer = (parsed.data ?? parsed).Renderer;
  const threads = [];
  for (const [pid, proc] of renderer.processes)
    for (const [tid, th] of proc.threads) {
      const byName = {};
      for (const e of th.entries) byName[e.name] = (byName[e.name] || 0) + 1;
      threads.push({pid, tid, name: th.name, byName, roots: th.tree?.roots.size});
    }
  return {threads};
})()`;
const reply = await send('Runtime.evaluate', {expression, awaitPromise: true, returnByValue: true},
                         sessionId);
const value = reply.result?.result?.value;
if (!value) await finish(1, `evaluation failed: ${JSON.stringify(reply)}`);
if (value.skip) await finish(SKIP, `skipped: this DevTools has no trace engine to load (${value.skip})`);

const want = {'server::handle(unsigned long)': 20, 'server::parse(unsigned long)': 20,
              'fib(unsigned long)': 216};
const names = {4242: 'demo-server', 4243: 'worker-1'};
let failures = 0;
for (const tid of [4242, 4243]) {
  const th = value.threads.find(t => t.tid === tid);
  const got = th && JSON.stringify({name: th.name, byName: th.byName, roots: th.roots});
  const expected = JSON.stringify({name: names[tid], byName: want, roots: 20});
  if (got !== expected) failures++, console.log(`thread ${tid}: got ${got}, want ${expected}`);
}
await finish(failures ? 1 : 0, failures ? '' : `DevTools read ${JSON.stringify(value.threads)}`);
