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

document.addEventListener("htmx:oobBeforeSwap", (event) => {
  const { target, fragment } = event.detail;
  if (target.id === "messages") {
    event.detail.shouldSwap = false;
    for (const article of [...fragment.children].filter(isMessage)) {
      // Inserted here rather than by htmx, so its attributes (the "full message" button)
      // are set up here too.
      if (merge(target, article)) htmx.process(article);
    }
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
  const session = event.target.closest("[data-catch-up-url]");
  const list = document.getElementById("messages");
  if (!session || !list) return;
  // The answer is made of out-of-band swaps only, like a push.
  htmx.ajax("GET", `${session.dataset.catchUpUrl}?after=${lastSeq(list)}`, {
    target: list,
    swap: "none",
  });
});
