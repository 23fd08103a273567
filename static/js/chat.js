// The chat's live turn: text deltas placed by offset, the turn fragment kept at its longest,
// the composer's keys and its emptying, and the page following the conversation.
//
// Every delta names the character offset it starts at. The page may already hold part of it
// (the turn was re-read from the database after a reconnect, and the database is saved before
// anything is pushed), hold exactly up to it (the usual case), or miss what came before it
// (a push lost while the socket was down): then the turn is re-read from the database.

// Offsets count characters as Python does (code points), not UTF-16 units.
function length(text) {
  return Array.from(text).length;
}

function after(text, count) {
  return Array.from(text).slice(count).join("");
}

function staleTurn() {
  htmx.trigger(document.body, "ctxhub-turn-stale");
}

// Texts of the turn on the page, by element id, before a new fragment replaces it.
let shownTexts = new Map();

function rememberTexts() {
  shownTexts = new Map(
    [...document.querySelectorAll("#chat-turn .stream-text")].map((el) => [el.id, el.textContent]),
  );
}

// A fragment read from the database can be older than deltas already shown: the longer
// text wins when it continues the shorter.
function keepLongerTexts() {
  for (const el of document.querySelectorAll("#chat-turn .stream-text")) {
    const shown = shownTexts.get(el.id);
    if (shown && shown.length > el.textContent.length && shown.startsWith(el.textContent)) {
      el.textContent = shown;
    }
  }
  shownTexts = new Map();
}

// The timeline scrolls in its own pane (the page around it stays put). It follows new
// messages only while the reader is at its end: someone reading further up, or a page
// opened at a message (?at=SEQ), is left where they are.
function pane() {
  return document.getElementById("timeline");
}

function nearBottom() {
  const timeline = pane();
  return !timeline || timeline.scrollHeight - timeline.scrollTop - timeline.clientHeight < 160;
}

let following = false;
document.addEventListener(
  "scroll",
  (event) => {
    if (event.target === pane()) following = nearBottom();
  },
  true,
);

function follow() {
  const timeline = pane();
  if (following && timeline && document.getElementById("chat")) {
    timeline.scrollTop = timeline.scrollHeight;
  }
}

// On load: at the message asked for, else at the end of the conversation.
function openTimeline() {
  const timeline = pane();
  if (!timeline) return;
  const article = timeline.dataset.at && document.getElementById(`msg-${timeline.dataset.at}`);
  if (article) {
    timeline.scrollTop = article.offsetTop - 8;
    article.classList.add("flash");
    setTimeout(() => article.classList.remove("flash"), 1200);
  } else {
    timeline.scrollTop = timeline.scrollHeight;
  }
  following = nearBottom();
}
openTimeline();

document.addEventListener("htmx:oobBeforeSwap", (event) => {
  const { target, fragment } = event.detail;
  const delta = fragment.querySelector && fragment.querySelector("span[data-at]");
  if (delta && target.classList.contains("stream-text")) {
    event.detail.shouldSwap = false;
    const at = Number(delta.dataset.at);
    const have = length(target.textContent);
    const text = delta.textContent;
    if (at > have) {
      staleTurn();
    } else if (at + length(text) > have) {
      target.append(after(text, have - at));
      follow();
    }
  } else if (target.id === "chat-turn") {
    rememberTexts();
  }
});

// A refusal because the turn was running lapses when it ends (stopped, answered, failed).
function dropLapsedRefusals() {
  if (document.querySelector('#chat-turn[data-status="running"]')) return;
  for (const refusal of document.querySelectorAll("#chat-answer [data-while-turn-runs]")) {
    refusal.remove();
  }
}

document.addEventListener("htmx:oobAfterSwap", (event) => {
  if (event.detail.target.id === "chat-turn") {
    keepLongerTexts();
    dropLapsedRefusals();
  }
});

document.addEventListener("htmx:beforeSwap", (event) => {
  if (event.detail.target.id === "chat-turn") rememberTexts();
});

document.addEventListener("htmx:afterSwap", (event) => {
  if (event.detail.target.id === "chat-turn") {
    keepLongerTexts();
    dropLapsedRefusals();
  }
  if (event.detail.target.closest?.("#chat")) follow();
});

// Whatever a push brought (a message, a delta, a tool), the page follows it to the end.
document.addEventListener("htmx:wsAfterMessage", follow);

// A reconnected socket missed what was pushed meanwhile: the turn is re-read.
document.addEventListener("htmx:wsOpen", staleTurn);

// The composer is emptied when the server accepts its message, unless it was typed into since
// that message was sent. The turn reaches the page over the socket, which can be quicker than
// the send's own answer: a person may already see it running and type the next message, even
// send it (htmx queues it behind the first, to send what the box holds then). Emptying the box
// on the first answer would lose that text, and the queued send with it.
let typedSinceSent = false;

document.addEventListener("input", (event) => {
  if (event.target.closest?.("#chat-form")) typedSinceSent = true;
});

document.addEventListener("htmx:beforeRequest", (event) => {
  if (event.detail.elt.id !== "chat-form") return;
  typedSinceSent = false;
  const answer = document.getElementById("chat-answer");
  if (answer) answer.textContent = ""; // the last command's answer goes with a new prompt
});

document.addEventListener("htmx:afterRequest", (event) => {
  const form = event.detail.elt;
  if (form.id === "chat-form" && event.detail.successful && !typedSinceSent) form.reset();
});

// The composer comes disabled and is enabled once htmx has processed it (htmx.onLoad runs
// for the page as htmx starts, and for any fragment it swaps in later).
htmx.onLoad((root) => {
  const fields = root.matches?.("[data-until-ready]")
    ? [root]
    : [...(root.querySelectorAll?.("[data-until-ready]") ?? [])];
  for (const fieldset of fields) fieldset.disabled = false;
});

document.addEventListener("keydown", (event) => {
  const box = event.target.closest && event.target.closest("#chat-form textarea");
  if (box && event.key === "Enter" && !event.shiftKey && !event.isComposing) {
    event.preventDefault();
    box.form.requestSubmit();
  }
});

// A new chat's example prompts: one click sends it, as if typed.
document.addEventListener("click", (event) => {
  const example = event.target.closest?.("button[data-prompt]");
  const form = document.getElementById("chat-form");
  if (!example || !form) return;
  form.elements.prompt.value = example.dataset.prompt;
  form.requestSubmit();
});

// A tool call opens with its result (the fold just below it, in the next message), and closes
// with it.
document.addEventListener(
  "toggle",
  (event) => {
    const call = event.target;
    if (!call.matches?.("details.fold-tool-call[data-call]")) return;
    for (const result of document.querySelectorAll("details.fold-tool-return[data-call]")) {
      if (result.dataset.call === call.dataset.call) result.open = call.open;
    }
  },
  true,
);

// The governance detail of every message, or only of the one hovered or focused: kept per
// browser.
const DETAIL_KEY = "ctxhub.timeline-detail";

function showDetail(on) {
  pane()?.classList.toggle("detailed", on);
  for (const box of document.querySelectorAll("[data-timeline-detail]")) box.checked = on;
}

document.addEventListener("change", (event) => {
  if (!event.target.matches?.("[data-timeline-detail]")) return;
  localStorage.setItem(DETAIL_KEY, event.target.checked ? "on" : "off");
  showDetail(event.target.checked);
});
showDetail(localStorage.getItem(DETAIL_KEY) === "on");
