// Keeps a live session page complete and in order.
//
// Messages arrive two ways: pushed over the session socket, and fetched when the socket
// (re)opens, to catch up on what was appended while nobody listened (between the page render
// and the connection, or during a reconnect). The two can overlap or cross, so after every
// swap the list is put back to one article per seq, in seq order.

function lastSeq(list) {
  const seqs = [...list.querySelectorAll(":scope > article[data-seq]")].map((el) => Number(el.dataset.seq));
  return seqs.length ? Math.max(...seqs) : -1;
}

function normalise(list) {
  const bySeq = new Map();
  for (const article of list.querySelectorAll(":scope > article[data-seq]")) {
    const seq = Number(article.dataset.seq);
    if (bySeq.has(seq)) article.remove();
    else bySeq.set(seq, article);
  }
  const ordered = [...bySeq.keys()].sort((a, b) => a - b);
  const current = [...list.querySelectorAll(":scope > article[data-seq]")];
  if (current.some((el, i) => Number(el.dataset.seq) !== ordered[i])) {
    for (const seq of ordered) list.appendChild(bySeq.get(seq));
  }
}

document.addEventListener("htmx:wsOpen", (event) => {
  const session = event.target.closest("[data-catch-up-url]");
  const list = document.getElementById("messages");
  if (!session || !list) return;
  htmx.ajax("GET", `${session.dataset.catchUpUrl}?after=${lastSeq(list)}`, {
    target: list,
    swap: "beforeend",
  });
});

for (const name of ["htmx:afterSettle", "htmx:oobAfterSwap", "htmx:wsAfterMessage"]) {
  document.addEventListener(name, () => {
    const list = document.getElementById("messages");
    if (list) normalise(list);
  });
}
