// capability-sandbox node shim: speaks the native protocol for a JavaScript module.
// argv[1] is the module path inside the sandbox. stdin: line 1 = request envelope; after the
// shim answers {"manifest": ..., "hooks": [...], "runtime": "v.."} the host sends {"proceed": true} and closes
// stdin. In a session (line 1 has "session": true) stdin stays open: each further line is one
// more envelope, answered by one response line, until the host closes stdin.
import { readSync, writeSync } from 'node:fs';
import { pathToFileURL } from 'node:url';

const modulePath = process.argv[1];
// Warms the module loader before the request is read: in a pre-started sandbox this is done
// ahead of the run.
await import('data:text/javascript,');
// Read before the module loads: the handshake reports it as the run's runtime version.
const runtime = process.version;
const pending = [];
let buffered = Buffer.alloc(0);
function readLine() {
  const chunk = Buffer.alloc(65536);
  for (;;) {
    const nl = buffered.indexOf(10);
    if (nl >= 0) {
      const line = buffered.subarray(0, nl).toString('utf8');
      buffered = buffered.subarray(nl + 1);
      return line;
    }
    let n;
    try {
      n = readSync(0, chunk, 0, chunk.length, null);
    } catch (e) {
      if (e && e.code === 'EAGAIN') continue;
      throw e;
    }
    if (n === 0) {
      const line = buffered.toString('utf8');
      buffered = Buffer.alloc(0);
      return line.length ? line : null;
    }
    buffered = Buffer.concat([buffered, chunk.subarray(0, n)]);
  }
}
function send(obj) {
  let text;
  try {
    text = JSON.stringify(obj);
  } catch (e) {
    text = JSON.stringify({ error: { message: 'output is not JSON-serializable: ' + String(e && e.message), code: 'INVALID_OUTPUT' } });
  }
  const data = Buffer.from(text + '\n', 'utf8');
  let off = 0;
  while (off < data.length) off += writeSync(1, data, off, data.length - off);
}
function errorOf(e) {
  let message = e && typeof e === 'object' && 'message' in e ? String(e.message) : String(e);
  if (e && e.name && e.name !== 'Error' && !message.startsWith(e.name)) message = e.name + ': ' + message;
  let code = e && typeof e === 'object' && e.code != null ? String(e.code) : undefined;
  if (!code && /allocation failed|out of memory/i.test(message)) code = 'ENOMEM';
  if (code === 'ERR_MEMORY_ALLOCATION_FAILED') code = 'ENOMEM';
  return { error: code ? { message, code } : { message } };
}
// Guest output must not corrupt the protocol channel: console and process.stdout go to stderr.
const toStderr = (...args) => console.error(...args);
console.log = toStderr;
console.info = toStderr;
console.debug = toStderr;
process.stdout.write = process.stderr.write.bind(process.stderr);

let envelope;
try {
  envelope = JSON.parse(readLine() ?? 'null');
  if (!envelope || typeof envelope !== 'object') throw new Error('missing request envelope');
} catch (e) {
  send({ error: { message: 'shim: bad request envelope: ' + String(e && e.message), code: 'PROTOCOL' }, runtime });
  process.exit(0);
}
let cap;
try {
  const mod = await import(pathToFileURL(modulePath).href);
  cap = mod.default ?? mod.capability;
} catch (e) {
  send({ ...errorOf(e), runtime });
  process.exit(0);
}
if (!cap || (typeof cap !== 'object' && typeof cap !== 'function') || typeof cap.execute !== 'function' || cap.manifest == null || typeof cap.manifest !== 'object') {
  send({ error: { message: 'module does not export a capability {manifest, execute}', code: 'NOT_A_CAPABILITY' }, runtime });
  process.exit(0);
}
const hooks = ['plan', 'verify', 'rollback'].filter((h) => typeof cap[h] === 'function');
send({ manifest: cap.manifest, hooks, runtime });
let go;
try {
  go = JSON.parse(readLine() ?? 'null');
} catch {
  go = null;
}
if (!go || go.proceed !== true) process.exit(3);
async function runOp(env) {
  const context = {
    manifest: env.manifest,
    plan: env.plan ?? undefined,
    effects: env.effects ?? [],
    secrets: env.secrets ?? {},
  };
  try {
    let result;
    let hook = true;
    switch (env.op) {
      case 'execute':
        result = await cap.execute(env.input, context);
        break;
      case 'plan':
        if (typeof cap.plan === 'function') result = await cap.plan(env.input, context);
        else { hook = false; result = {}; }
        break;
      case 'verify':
        if (typeof cap.verify === 'function') result = await cap.verify(env.input, env.output, context);
        else { hook = false; result = null; }
        break;
      case 'rollback':
        if (typeof cap.rollback !== 'function') {
          const err = new Error('Capability does not provide rollback(): ' + String(cap.manifest.id));
          err.code = 'ROLLBACK_UNSUPPORTED';
          throw err;
        }
        result = await cap.rollback(env.receipt, context);
        break;
      default:
        throw Object.assign(new Error('unknown op ' + String(env.op)), { code: 'PROTOCOL' });
    }
    send({ output: result === undefined ? null : result, hook });
  } catch (e) {
    send(errorOf(e));
  }
}
await runOp(envelope);
// A session: the host sends one envelope per line and closes stdin when it is done.
if (envelope.session === true) {
  for (;;) {
    const line = readLine();
    if (line === null) break;
    let next;
    try {
      next = JSON.parse(line);
    } catch (e) {
      send({ error: { message: 'shim: bad request envelope: ' + String(e && e.message), code: 'PROTOCOL' }, runtime });
      break;
    }
    if (!next || typeof next !== 'object') break;
    await runOp(next);
  }
}
process.exit(0);
