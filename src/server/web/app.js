// nitro serve's web page: wires the chat (chat.js) and the live view (live.js) to the page.
import { apiKey, setApiKey } from './sse.js';
import { Chat } from './chat.js';
import { LiveView } from './live.js';

const $ = (id) => document.getElementById(id);
let modelId = '';

function askForKey() {
  $('settings').open = true;
  $('api-key').focus();
}

const live = new LiveView({
  onModel: (id) => {
    if (id && id !== modelId) {
      modelId = id;
      document.title = `${id} · nitro serve`;
    }
  },
  onAuthError: askForKey,
});

const chat = new Chat({
  messages: $('messages'), prompt: $('prompt'), send: $('send'), stop: $('stop'), reset: $('reset'),
  system: $('system'), temperature: $('temperature'), maxTokens: $('max-tokens'), extra: $('extra'),
  settings: $('settings'), settingsError: $('settings-error'),
}, { modelId: () => modelId, onAuthError: askForKey });

$('composer').addEventListener('submit', (e) => {
  e.preventDefault();
  const text = $('prompt').value;
  if (!text.trim()) return;
  $('prompt').value = '';
  chat.send(text);
});
$('prompt').addEventListener('keydown', (e) => {
  if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
    e.preventDefault();
    $('composer').requestSubmit();
  }
});
$('stop').addEventListener('click', () => chat.stop());
$('reset').addEventListener('click', () => chat.reset());

$('api-key').value = apiKey();
$('api-key').addEventListener('change', () => {
  setApiKey($('api-key').value.trim());
  live.restart();
});

live.run();
