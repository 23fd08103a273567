// Keeps a live session page complete and in order.
//
// Messages arrive two ways: pushed over the session socket, and fetched when the socket
// (re)opens, to catch up on what was appended while nobody listened (between the page render
// and the connection, or during a reconnect). The two can overlap or cross. Both arrive as
// the same out-of-band swap into #messages, and each article is merged in before anything
// is inserted: one already on the page is dropped, a new one goes where its seq belongs.
// Removing duplicates after the swap instead leaves two articles with the same id meanwhile.

function seqOf(el) {
  return Number(el.dataset.seq);
}

function isMessage(el) {
  return el.matches("article[data-seq]");
}

function lastSeq(list) {
  const seqs = [...list.children].filter(isMessage).map(seqOf);
  return seqs.length ? Math.max(...seqs) : -1;
}

// The list is in seq order at all times and new messages are nearly always the latest, so
// the search for the place runs from the end. Returns whether the article was inserted.
function merge(list, article) {
  const seq = seqOf(article);
  let before = list.lastElementChild;
  while (before && !(isMessage(before) && seqOf(before) <= seq)) {
    before = before.previousElementSibling;
  }
  if (before && seqOf(before) === seq) return false;
  list.insertBefore(article, before ? before.nextSibling : list.firstElementChild);
  return true;
}

// What governance does to the messages shown, the x-ray and the records all change with
// every append and record: they listen for this event and re-render from the database.
function changed() {
  htmx.trigger(document.body, "ctxhub-changed");
}

// Badges of every message on the page, in one request after a burst of changes.
let fatesTimer = null;
function refreshFates() {
  clearTimeout(fatesTimer);
  fatesTimer = setTimeout(() => {
    const session = document.querySelector("[data-fates-url]");
    const seqs = [...document.querySelectorAll("#messages > article[data-seq]")].map(seqOf);
    if (!session || !seqs.length) return;
    const url = `${session.dataset.fatesUrl}?from=${Math.min(...seqs)}&to=${Math.max(...seqs)}`;
    htmx.ajax("GET", url, { target: "#messages", swap: "none" });
  }, 300);
}
// Deferred: the body is parsed when this runs.
document.body.addEventListener("ctxhub-changed", refreshFates);

document.addEventListener("htmx:oobBeforeSwap", (event) => {
  const { target, fragment } = event.detail;
  if (target.id === "messages") {
    event.detail.shouldSwap = false;
    // A page opened at an older seq does not follow the log: a new message would leave a gap.
    if (target.dataset.following === "false") return;
    let added = false;
    for (const article of [...fragment.children].filter(isMessage)) {
      // Inserted here rather than by htmx, so its attributes (its buttons) are set up here too.
      if (merge(target, article)) {
        htmx.process(article);
        added = true;
      }
    }
    if (added) changed();
  } else if (target.id === "session-changed") {
    changed();
  } else if (target.id === "meter") {
    // A catch-up answer computed before a push can arrive after it: its meter counts fewer
    // messages than the one shown and would put the total back.
    const incoming = fragment.querySelector("#meter[data-messages]");
    if (incoming && Number(incoming.dataset.messages) < Number(target.dataset.messages)) {
      event.detail.shouldSwap = false;
    }
  }
});

document.addEventListener("htmx:wsOpen", (event) => {
  // Whatever happened while the socket was down is re-rendered from the database.
  changed();
  const session = event.target.closest("[data-catch-up-url]");
  const list = document.getElementById("messages");
  if (!session || !list) return;
  // The answer is made of out-of-band swaps only, like a push.
  htmx.ajax("GET", `${session.dataset.catchUpUrl}?after=${lastSeq(list)}`, {
    target: list,
    swap: "none",
  });
});

document.addEventListener("click", (event) => {
  // "Compact everything above this message": the preview of exactly that, in the compact panel.
  const above = event.target.closest(".compact-above");
  if (above) {
    const control = document.getElementById("compact-control");
    const form = document.getElementById("compact-form");
    form.elements.keep_from.value = above.dataset.seq;
    control.open = true;
    control.scrollIntoView({ block: "center" });
    htmx.trigger(form, "submit");
    return;
  }
  // A zone or a lineage link to a message on this page scrolls to it instead of loading a page.
  const link = event.target.closest("a[data-seq]");
  if (link) {
    const article = document.getElementById(`msg-${link.dataset.seq}`);
    if (article) {
      event.preventDefault();
      article.scrollIntoView({ block: "start" });
      article.classList.add("flash");
      setTimeout(() => article.classList.remove("flash"), 1200);
    }
  }
});

// A clear that went through: the form is emptied (the answer, in #clear-answer, says what
// stayed and what was dropped).
document.addEventListener("htmx:afterRequest", (event) => {
  if (event.detail.elt.id !== "clear-form" || !event.detail.successful) return;
  event.detail.elt.reset();
});

// Bars are drawn at their data-width (a percentage): the page's content security policy
// allows no style attributes in its HTML, and styles set from a script are allowed.
htmx.onLoad((root) => {
  const bars = root.matches?.("[data-width]") ? [root] : [];
  bars.push(...(root.querySelectorAll?.("[data-width]") ?? []));
  for (const bar of bars) bar.style.width = `${bar.dataset.width}%`;
});

// A re-render keeps what the reader opened: a <details> with an id that was open before the
// swap is open after it (the records are re-rendered after every change, a job's included).
document.addEventListener("htmx:beforeSwap", (event) => {
  const target = event.detail.target;
  target.dataset.openDetails = [...target.querySelectorAll("details[open][id]")].map((d) => d.id).join(" ");
});
document.addEventListener("htmx:afterSwap", (event) => {
  const target = event.detail.target;
  for (const id of (target.dataset.openDetails || "").split(" ").filter(Boolean)) {
    const details = document.getElementById(id);
    if (details && target.contains(details)) details.open = true;
  }
  delete target.dataset.openDetails;
});
// The same for a section a push replaces (the x-ray each request of a chat turn pushes).
let openBeforePush = [];
document.addEventListener("htmx:oobBeforeSwap", (event) => {
  openBeforePush = [...event.detail.target.querySelectorAll("details[open][id]")].map((d) => d.id);
});
document.addEventListener("htmx:oobAfterSwap", () => {
  for (const id of openBeforePush) {
    const details = document.getElementById(id);
    if (details) details.open = true;
  }
  openBeforePush = [];
});
