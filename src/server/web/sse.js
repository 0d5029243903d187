// Server-Sent Events over fetch() (EventSource cannot send an Authorization header), and the API
// key the user typed (kept in this browser's localStorage).

const KEY_STORE = 'nitro.apiKey';

export function apiKey() {
  return localStorage.getItem(KEY_STORE) ?? '';
}

export function setApiKey(key) {
  if (key) localStorage.setItem(KEY_STORE, key);
  else localStorage.removeItem(KEY_STORE);
}

/** Request headers with the API key, if one is set. */
export function authHeaders(extra = {}) {
  const key = apiKey();
  return key ? { ...extra, Authorization: `Bearer ${key}` } : { ...extra };
}

/** An HTTP error with the server's OpenAI-style message. */
export class HttpError extends Error {
  constructor(status, message, code) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

/** Throws HttpError for a non-2xx response, with the message of its JSON error body. */
export async function checkResponse(res) {
  if (res.ok) return res;
  let message = `HTTP ${res.status}`;
  let code = null;
  try {
    const body = await res.json();
    if (body?.error?.message) message = body.error.message;
    code = body?.error?.code ?? null;
  } catch { /* not JSON */ }
  throw new HttpError(res.status, message, code);
}

/**
 * Reads an SSE response body, calling onEvent({event, data}) for each event (event is "message"
 * when the stream names none). Resolves when the stream ends; rejects if reading fails.
 */
export async function readEvents(res, onEvent) {
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  let buf = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += decoder.decode(value, { stream: true }).replace(/\r\n?/g, '\n');
    let cut;
    while ((cut = buf.indexOf('\n\n')) >= 0) {
      const block = buf.slice(0, cut);
      buf = buf.slice(cut + 2);
      let event = 'message';
      const data = [];
      for (const line of block.split('\n')) {
        if (line.startsWith(':')) continue;  // comment (keep-alive)
        const colon = line.indexOf(':');
        const field = colon < 0 ? line : line.slice(0, colon);
        let value = colon < 0 ? '' : line.slice(colon + 1);
        if (value.startsWith(' ')) value = value.slice(1);
        if (field === 'event') event = value;
        else if (field === 'data') data.push(value);
      }
      if (data.length) onEvent({ event, data: data.join('\n') });
    }
  }
}
