// Keyboard shortcuts. A control that has one names it in its markup (data-shortcut="c", or a
// sequence such as "g s", and data-shortcut-help saying what it does); a key pressed outside a
// field finds the control on the page and uses it: a field is focused, a <summary> opened or
// closed, a link followed, a button or a checkbox pressed. "?" lists the page's shortcuts.
// Keys pressed with Ctrl, Alt or Meta are the browser's, and typing in a field is typing.

const SEQUENCE_MS = 1200;
let pending = "";
let pendingTimer = null;

function typing(target) {
  return Boolean(target.closest?.("input, textarea, select, [contenteditable]:not([contenteditable='false'])"));
}

function visibleControl(keys) {
  const controls = document.querySelectorAll(`[data-shortcut="${CSS.escape(keys)}"]`);
  return [...controls].find((el) => el.getClientRects().length > 0) ?? null;
}

function use(control) {
  if (control.matches("input:not([type=checkbox]), textarea, select")) {
    control.focus();
    control.select?.();
  } else {
    control.click();
    if (control.matches("summary")) control.focus();
  }
}

function listShortcuts() {
  const list = document.getElementById("shortcuts-list");
  const dialog = document.getElementById("shortcuts");
  if (!list || !dialog) return;
  const seen = new Set();
  const rows = [];
  for (const control of document.querySelectorAll("[data-shortcut]")) {
    const keys = control.dataset.shortcut;
    if (seen.has(keys) || control.getClientRects().length === 0) continue;
    seen.add(keys);
    const row = document.createElement("tr");
    const cell = document.createElement("td");
    for (const key of keys.split(" ")) {
      const kbd = document.createElement("kbd");
      kbd.textContent = key;
      cell.append(kbd, " ");
    }
    const help = document.createElement("td");
    help.textContent = control.dataset.shortcutHelp || control.textContent.trim();
    row.append(cell, help);
    rows.push(row);
  }
  list.replaceChildren(...rows);
  dialog.showModal();
}

document.addEventListener("click", (event) => {
  if (event.target.closest?.("[data-shortcut='?']")) listShortcuts();
});

document.addEventListener("keydown", (event) => {
  if (event.ctrlKey || event.altKey || event.metaKey || event.isComposing) return;
  if (event.key === "Escape" && typing(event.target)) {
    event.target.blur();
    return;
  }
  if (typing(event.target) || document.querySelector("dialog[open]")) return;
  if (event.key.length !== 1) return;
  const keys = pending ? `${pending} ${event.key}` : event.key;
  clearTimeout(pendingTimer);
  pending = "";
  if (keys === "?") {
    event.preventDefault();
    listShortcuts();
    return;
  }
  const control = visibleControl(keys);
  if (control) {
    event.preventDefault();
    use(control);
  } else if (document.querySelector(`[data-shortcut^="${CSS.escape(keys)} "]`)) {
    // The first key of a sequence: the next one, soon, completes it.
    pending = keys;
    pendingTimer = setTimeout(() => {
      pending = "";
    }, SEQUENCE_MS);
  }
});
