// The fleet's columns: those a reader unticks under "Columns" are hidden, and stay hidden in
// this browser, on every page of the fleet and after every search, sort or page the table is
// replaced by.
const HIDDEN_KEY = "ctxhub.fleet-hidden-columns";

function hiddenColumns() {
  try {
    const kept = JSON.parse(localStorage.getItem(HIDDEN_KEY) || "[]");
    return new Set(Array.isArray(kept) ? kept : []);
  } catch {
    return new Set();
  }
}

function showColumns(root) {
  const hidden = hiddenColumns();
  for (const box of root.querySelectorAll?.("input[data-column]") ?? []) {
    box.checked = !hidden.has(box.dataset.column);
  }
  for (const table of root.querySelectorAll?.("table.sessions") ?? []) {
    for (const cell of table.querySelectorAll("[class*='col-']")) {
      const column = [...cell.classList].find((name) => name.startsWith("col-"));
      cell.hidden = hidden.has(column.slice("col-".length));
    }
  }
}

document.addEventListener("change", (event) => {
  const box = event.target.closest?.("input[data-column]");
  if (!box) return;
  const hidden = hiddenColumns();
  if (box.checked) hidden.delete(box.dataset.column);
  else hidden.add(box.dataset.column);
  localStorage.setItem(HIDDEN_KEY, JSON.stringify([...hidden]));
  showColumns(document);
});

htmx.onLoad(() => showColumns(document));
