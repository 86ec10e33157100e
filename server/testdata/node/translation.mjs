// The official openai SDK's Realtime translation API against the gateway,
// run by server/translation_sdk_test.go. It prints one JSON object of what
// it saw; the Go test asserts on it.
//
//   GATEWAY_BASE  https://127.0.0.1:PORT/v1 (the SDK only dials wss://)
//   GATEWAY_KEY   a gateway key
//   NODE_EXTRA_CA_CERTS  the gateway's test certificate
import OpenAI from 'openai';
import { OpenAIRealtimeTranslationWS } from 'openai/realtime/translations/ws';

const out = {};
const withTimeout = (p, what) =>
  Promise.race([p, new Promise((_, rej) => setTimeout(() => rej(new Error(`timed out: ${what}`)), 10000))]);
const opened = (conn) =>
  conn.socket.readyState === 1
    ? Promise.resolve()
    : new Promise((res, rej) => {
        conn.socket.once('open', res);
        conn.socket.once('error', rej);
        conn.socket.once('close', () => rej(new Error('closed before opening')));
      });

try {
  const client = new OpenAI({ apiKey: process.env.GATEWAY_KEY, baseURL: process.env.GATEWAY_BASE });

  // A client secret for a translation session.
  const secret = await client.realtime.translations.clientSecrets.create({
    session: { model: 'gpt-realtime-translate', audio: { output: { language: 'de' } } },
  });
  out.secret_is_ek = secret.value.startsWith('ek_');
  out.secret_session_type = secret.session?.type;

  // A translation session with the gateway key: update, audio, finish.
  const conn = await OpenAIRealtimeTranslationWS.create(client, { model: 'gpt-realtime-translate' });
  out.url_path = conn.url.pathname;
  const events = [];
  conn.on('event', (e) => events.push(e.type));
  const errors = [];
  conn.on('error', (e) => errors.push(String(e?.message ?? e)));
  const created = withTimeout(new Promise((res) => conn.on('session.created', res)), 'session.created');
  await withTimeout(opened(conn), 'the socket to open');
  const first = await created;
  out.created_model = first.session?.model;
  const updated = withTimeout(new Promise((res) => conn.on('session.updated', res)), 'session.updated');
  conn.send({ type: 'session.update', session: { audio: { output: { language: 'fr' } } } });
  out.updated_language = (await updated).session?.audio?.output?.language;
  const transcript = withTimeout(new Promise((res) => conn.on('session.output_transcript.delta', res)), 'a transcript delta');
  conn.send({ type: 'session.input_audio_buffer.append', audio: Buffer.alloc(4800, 7).toString('base64') });
  out.transcript_delta = (await transcript).delta;
  await conn.finish({ timeoutMs: 10000 });
  out.closed = events.includes('session.closed');
  out.errors = errors;
} catch (e) {
  out.error = String(e?.message ?? e);
}
console.log(JSON.stringify(out));
