// The chat: streams /v1/chat/completions (SSE), folds reasoning, shows tool calls. Text is only
// ever inserted as text nodes (never as HTML), so a reply cannot inject markup.
import { authHeaders, checkResponse, readEvents, HttpError } from './sse.js';

const el = (tag, cls, text) => {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
};

/** Renders text with ``` fences as <pre> blocks, everything else as plain text. */
function renderContent(node, text) {
  node.replaceChildren();
  const parts = text.split('```');
  parts.forEach((part, i) => {
    if (i % 2 === 0) {
      if (part) node.append(document.createTextNode(part));
    } else {
      const nl = part.indexOf('\n');
      const code = nl >= 0 ? part.slice(nl + 1) : part;  // drop the language tag
      node.append(el('pre', null, code.replace(/\n$/, '')));
    }
  });
}

function prettyArgs(args) {
  try {
    return JSON.stringify(JSON.parse(args), null, 2);
  } catch {
    return args;  // still streaming, or not JSON
  }
}

/** One assistant reply being streamed: its bubble and what it has received. */
class Reply {
  constructor(container) {
    this.content = '';
    this.reasoning = '';
    this.toolCalls = [];
    this.finish = null;
    this.usage = null;
    this.t0 = performance.now();
    this.tFirst = null;
    this.node = el('div', 'msg assistant streaming');
    this.node.dataset.state = 'streaming';
    this.details = el('details', 'reasoning');
    this.details.hidden = true;
    this.summary = el('summary', null, 'Reasoning');
    this.reasoningText = el('div', 'reasoning-text');
    this.details.append(this.summary, this.reasoningText);
    this.contentNode = el('div', 'content');
    this.toolsNode = el('div', 'tools');
    this.metaNode = el('div', 'meta');
    this.node.append(this.details, this.contentNode, this.toolsNode, this.metaNode);
    container.append(this.node);
    this.dirty = false;
  }

  /** Applies one chunk's delta (OpenAI chat.completion.chunk). */
  apply(chunk) {
    if (chunk.usage) this.usage = chunk.usage;
    const choice = chunk.choices?.[0];
    if (!choice) return;
    const d = choice.delta ?? {};
    if (this.tFirst === null && (d.content || d.reasoning_content || d.tool_calls)) this.tFirst = performance.now();
    if (d.reasoning_content) this.reasoning += d.reasoning_content;
    if (d.content) this.content += d.content;
    for (const t of d.tool_calls ?? []) {
      const at = t.index ?? this.toolCalls.length;
      const call = (this.toolCalls[at] ??= { id: '', name: '', arguments: '' });
      if (t.id) call.id = t.id;
      if (t.function?.name) call.name += t.function.name;
      if (t.function?.arguments) call.arguments += t.function.arguments;
    }
    if (choice.finish_reason) this.finish = choice.finish_reason;
    this.schedule();
  }

  schedule() {
    if (this.dirty) return;
    this.dirty = true;
    requestAnimationFrame(() => this.render());
  }

  render() {
    this.dirty = false;
    if (this.reasoning) {
      this.details.hidden = false;
      this.summary.textContent = `Reasoning (${this.reasoning.length} characters)`;
      this.reasoningText.textContent = this.reasoning;
    }
    renderContent(this.contentNode, this.content);
    this.toolsNode.replaceChildren(...this.toolCalls.map((c) => {
      const box = el('div', 'tool-call');
      box.append(el('span', 'tool-name', `tool call: ${c.name}`), el('pre', 'tool-args', prettyArgs(c.arguments)));
      return box;
    }));
  }

  done(error) {
    this.render();
    this.node.classList.remove('streaming');
    const t1 = performance.now();
    if (error) {
      this.node.classList.add('error');
      this.node.dataset.state = 'error';
      this.metaNode.textContent = error;
      return;
    }
    this.node.dataset.state = 'done';
    // Times as this page saw them (the server's own TTFT and tok/s are in the cards on the right).
    const parts = [];
    if (this.usage) parts.push(`${this.usage.completion_tokens} tokens in ${((t1 - this.t0) / 1000).toFixed(2)} s`);
    if (this.tFirst !== null) parts.push(`first text after ${Math.round(this.tFirst - this.t0)} ms`);
    if (this.finish) parts.push(`finish: ${this.finish}`);
    this.metaNode.textContent = parts.join(' · ');
  }

  /** The message to keep in the conversation. */
  message() {
    const m = { role: 'assistant', content: this.content };
    if (this.toolCalls.length)
      m.tool_calls = this.toolCalls.map((c) => ({ id: c.id, type: 'function', function: { name: c.name, arguments: c.arguments } }));
    return m;
  }
}

export class Chat {
  /**
   * els: {messages, prompt, send, stop, reset, system, temperature, maxTokens, extra, settings,
   * settingsError}; modelId(): the served model's id; onAuthError(): called on a 401.
   */
  constructor(els, { modelId, onAuthError }) {
    this.els = els;
    this.modelId = modelId;
    this.onAuthError = onAuthError;
    this.history = [];
    this.abort = null;
  }

  /** The request body for the conversation so far; throws for bad extra JSON. */
  body() {
    let extra = {};
    const text = this.els.extra.value.trim();
    if (text) {
      try {
        extra = JSON.parse(text);
      } catch (e) {
        throw new Error(`Extra request fields: not JSON (${e.message})`);
      }
      if (typeof extra !== 'object' || extra === null || Array.isArray(extra)) throw new Error('Extra request fields: must be a JSON object');
    }
    const messages = [];
    const system = this.els.system.value.trim();
    if (system) messages.push({ role: 'system', content: system });
    messages.push(...this.history);
    const body = { messages, stream: true, stream_options: { include_usage: true } };
    if (this.modelId()) body.model = this.modelId();
    const temperature = Number(this.els.temperature.value);
    if (this.els.temperature.value !== '' && Number.isFinite(temperature)) body.temperature = temperature;
    const maxTokens = Number(this.els.maxTokens.value);
    if (this.els.maxTokens.value !== '' && Number.isInteger(maxTokens) && maxTokens > 0) body.max_tokens = maxTokens;
    return { ...body, ...extra };
  }

  async send(text) {
    if (this.abort || !text.trim()) return;
    this.els.settingsError.hidden = true;
    const user = { role: 'user', content: text };
    this.history.push(user);
    let body;
    try {
      body = this.body();
    } catch (e) {
      this.history.pop();
      this.els.settingsError.textContent = e.message;
      this.els.settingsError.hidden = false;
      this.els.settings.open = true;
      return;
    }
    this.els.messages.querySelector('.hint')?.remove();
    this.els.messages.append(el('div', 'msg user', text));
    const reply = new Reply(this.els.messages);
    this.scroll();
    this.abort = new AbortController();
    this.busy(true);
    let error = null;
    try {
      const res = await checkResponse(await fetch('/v1/chat/completions', {
        method: 'POST',
        headers: authHeaders({ 'Content-Type': 'application/json' }),
        body: JSON.stringify(body),
        signal: this.abort.signal,
      }));
      await readEvents(res, ({ data }) => {
        if (data === '[DONE]') return;
        const chunk = JSON.parse(data);
        if (chunk.error) throw new HttpError(500, chunk.error.message, chunk.error.code);
        reply.apply(chunk);
        this.scroll();
      });
    } catch (e) {
      if (e.name === 'AbortError') error = 'stopped';
      else error = e.message;
      if (e instanceof HttpError && e.status === 401) this.onAuthError();
    }
    reply.done(error);
    if (error && error !== 'stopped') this.history.pop();  // the turn failed: let the user retry it
    else this.history.push(reply.message());
    this.abort = null;
    this.busy(false);
    this.scroll();
  }

  stop() {
    this.abort?.abort();
  }

  reset() {
    this.stop();
    this.history = [];
    this.els.messages.replaceChildren();
  }

  busy(on) {
    this.els.send.disabled = on;
    this.els.stop.disabled = !on;
  }

  scroll() {
    const m = this.els.messages;
    m.scrollTop = m.scrollHeight;
  }
}
