// A client continuing across a resume (server/resume_sdk_test.go): the
// upstream is cut during the first response; the client must see that
// response end (failed), the gateway's rtgate.session.resumed event, and a
// second turn answered on the same socket. It prints one JSON object.
//
//   CLIENT        openai (the official SDK's OpenAIRealtimeWS) or agents
//                 (@openai/agents-realtime's OpenAIRealtimeWebSocket)
//   GATEWAY_BASE  https://127.0.0.1:PORT/v1 (openai: it only dials wss://)
//   GATEWAY_URL   ws(s)://127.0.0.1:PORT/v1/realtime?model=gpt-realtime (agents)
//   GATEWAY_KEY   a gateway key
import OpenAI from 'openai';
import { OpenAIRealtimeWS } from 'openai/realtime/ws';
import { OpenAIRealtimeWebSocket } from '@openai/agents-realtime';

const out = { events: [], turns_done: [], statuses: [] };
const timeout = (what) => new Promise((_, rej) => setTimeout(() => rej(new Error(`timed out: ${what}`)), 15000));

function waitFor(on, type) {
  return Promise.race([new Promise((res) => on(type, res)), timeout(type)]);
}

const item = (id, text) => ({ type: 'conversation.item.create',
  item: { id, type: 'message', role: 'user', content: [{ type: 'input_text', text }] } });

try {
  if (process.env.CLIENT === 'openai') {
    const client = new OpenAI({ apiKey: process.env.GATEWAY_KEY, baseURL: process.env.GATEWAY_BASE });
    const rt = new OpenAIRealtimeWS({ model: 'gpt-realtime' }, client);
    const seen = new Map();
    const on = (type, f) => seen.set(type, [...(seen.get(type) ?? []), f]);
    rt.on('event', (e) => {
      out.events.push(e.type);
      if (e.type === 'response.done') out.statuses.push(e.response.status);
      for (const f of seen.get(e.type) ?? []) f(e);
      seen.delete(e.type);
    });
    rt.on('error', (e) => { out.error ??= String(e?.message ?? e); });
    await waitFor(on, 'session.created');
    rt.send({ type: 'session.update', session: { type: 'realtime', instructions: 'From the SDK.' } });
    await waitFor(on, 'session.updated');
    rt.send(item('item_sdk1', 'hello'));
    await waitFor(on, 'conversation.item.done');
    rt.send({ type: 'response.create' });
    out.resumed = await waitFor(on, 'rtgate.session.resumed');
    rt.send(item('item_sdk2', 'and then?'));
    await waitFor(on, 'conversation.item.done');
    rt.send({ type: 'response.create' });
    await waitFor(on, 'response.done');
    rt.close({ code: 1000, reason: 'done' });
  } else {
    const t = new OpenAIRealtimeWebSocket({ url: process.env.GATEWAY_URL });
    const seen = new Map();
    const on = (type, f) => seen.set(type, [...(seen.get(type) ?? []), f]);
    t.on('*', (e) => {
      out.events.push(e.type);
      if (e.type === 'response.done') out.statuses.push(e.response.status);
      for (const f of seen.get(e.type) ?? []) f(e);
      seen.delete(e.type);
    });
    // Emitted only for a response.done that passes the SDK's schema.
    t.on('turn_done', (e) => out.turns_done.push(e.response.id));
    t.on('error', (e) => { out.error ??= String(e?.error?.message ?? e?.message ?? JSON.stringify(e)); });
    await Promise.race([t.connect({ apiKey: process.env.GATEWAY_KEY, model: 'gpt-realtime',
      initialSessionConfig: { instructions: 'From the agents SDK.' } }), timeout('connect')]);
    t.sendEvent(item('item_agents1', 'hello'));
    await waitFor(on, 'conversation.item.done');
    t.sendEvent({ type: 'response.create' });
    out.resumed = await waitFor(on, 'rtgate.session.resumed');
    t.sendEvent(item('item_agents2', 'and then?'));
    await waitFor(on, 'conversation.item.done');
    t.sendEvent({ type: 'response.create' });
    await waitFor(on, 'response.done');
    out.status = t.status;
    t.close();
  }
} catch (e) {
  out.error ??= String(e?.message ?? e);
}
console.log(JSON.stringify(out));
process.exit(0);
