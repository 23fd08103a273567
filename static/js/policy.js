// The policy editor: opened, it takes the whole window, its knobs on one side and the preview
// of the edits on the other, and a search over the knobs narrows them as it is typed.
//
// The Policy <details> in the inspector stays what opens it, and what htmx loads the editor
// on; its dialog is shown modal while it is open, so the page behind is inert and Escape
// closes it. The two open and close together, whichever was used: the summary, the dialog's
// Close button, or Escape (which first empties a search box that has text in it).

const policyControl = document.getElementById("policy-control");
const policyDialog = document.getElementById("policy-dialog");

if (policyControl && policyDialog) {
  policyControl.addEventListener("toggle", () => {
    if (policyControl.open && !policyDialog.open) {
      policyDialog.showModal();
      // Opened again: typing goes to the search first (the first time, once it has loaded).
      policyDialog.querySelector("#policy-search")?.focus();
    } else if (!policyControl.open && policyDialog.open) {
      policyDialog.close();
    }
  });
  policyDialog.addEventListener("close", () => {
    policyControl.open = false;
  });
}

// Which knobs are shown: those whose label, dotted name or description hold every word
// searched for, and, when asked, only those that differ from the default. A group left
// without a knob shown is hidden with them.

function searchWords(text) {
  return text.toLocaleLowerCase().split(/\s+/).filter(Boolean);
}

function searchedText(row) {
  const parts = row.querySelectorAll("label, .knob-name, .knob-description");
  return [...parts].map((part) => part.textContent).join(" ").toLocaleLowerCase();
}

function knobDiffers(row) {
  return row.querySelector(".knob-mark").textContent.trim() !== "";
}

function shownSummary(shown, total, searched, onlyChanged) {
  const knobs = `${total} knob${total === 1 ? "" : "s"}`;
  if (searched && onlyChanged) return `${shown} of ${knobs} match and differ from the default`;
  if (searched) return `${shown} of ${knobs} match`;
  if (onlyChanged) return `${shown} of ${knobs} differ from the default`;
  return knobs;
}

function noneShown(searched, onlyChanged) {
  if (!searched) return "No knob differs from the default.";
  const among = onlyChanged ? " among those that differ from the default" : "";
  return `No knob matches “${searched}”${among}.`;
}

function filterKnobs() {
  const editor = policyDialog && policyDialog.querySelector(".policy-editor");
  if (!editor) return;
  const search = editor.querySelector("#policy-search");
  const searched = search.value.trim();
  const wanted = searchWords(searched);
  const onlyChanged = editor.querySelector(".only-changed").checked;
  const rows = [...editor.querySelectorAll("tr.knob")];
  let shown = 0;
  for (const row of rows) {
    const text = searchedText(row);
    const show =
      (wanted.every((word) => text.includes(word)) && (!onlyChanged || knobDiffers(row))) ||
      // The knob being edited stays, even once set back to its default: hiding it would
      // throw the focus out of the form mid-edit.
      row.contains(document.activeElement);
    row.hidden = !show;
    if (show) shown += 1;
  }
  for (const group of editor.querySelectorAll(".knob-group")) {
    group.hidden = !group.querySelector("tr.knob:not([hidden])");
  }
  editor.querySelector("#policy-search-count").textContent = shownSummary(
    shown,
    rows.length,
    searched,
    onlyChanged,
  );
  const none = editor.querySelector(".policy-no-match");
  none.hidden = shown > 0;
  none.textContent = shown > 0 ? "" : noneShown(searched, onlyChanged);
}

document.addEventListener("input", (event) => {
  if (event.target.id === "policy-search") filterKnobs();
});
document.addEventListener("change", (event) => {
  if (event.target.matches(".only-changed")) filterKnobs();
});
// Escape empties the search before it closes the editor, in every browser.
document.addEventListener("keydown", (event) => {
  if (event.key !== "Escape" || event.target.id !== "policy-search" || !event.target.value) return;
  event.preventDefault();
  event.target.value = "";
  filterKnobs();
});

// Every answer inside the editor can change what the filters leave: the editor itself
// loaded or saved (new rows), or a preview marking which knobs now differ (out of band).
document.addEventListener("htmx:afterSettle", (event) => {
  if (!policyDialog || !policyDialog.contains(event.target)) return;
  filterKnobs();
  // Just loaded: typing goes to the search first.
  if (event.target.id === "policy-control-body" && event.detail.requestConfig?.verb === "get") {
    policyDialog.querySelector("#policy-search").focus();
  }
});
