// A file input marked data-autosubmit sends its form as soon as files are chosen or dropped
// on it (the browser drops files on a file input by itself).
document.addEventListener("change", (event) => {
  const input = event.target;
  if (input instanceof HTMLInputElement && input.type === "file" && input.hasAttribute("data-autosubmit") && input.files.length) {
    input.form.requestSubmit();
  }
});
