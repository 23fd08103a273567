// The API keys page: copy a new key (shown once) to the clipboard. The clipboard API needs a
// secure context (HTTPS or localhost); elsewhere the key is selected for Ctrl+C.
document.addEventListener("click", async (event) => {
  const button = event.target.closest("[data-copy]");
  if (!button) return;
  const source = document.querySelector(button.dataset.copy);
  const said = button.parentElement.querySelector("[data-copied]");
  try {
    await navigator.clipboard.writeText(source.textContent.trim());
    said.textContent = "Copied.";
  } catch {
    const range = document.createRange();
    range.selectNodeContents(source);
    window.getSelection().removeAllRanges();
    window.getSelection().addRange(range);
    said.textContent = "Selected: press Ctrl+C (or ⌘C) to copy.";
  }
});
