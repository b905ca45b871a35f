// onejob dashboard: small progressive enhancements. Every page works without this script.
"use strict";

// A resolve form's result field matters only for "succeeded": show it (and send it) only then.
function wireResolveForm(form) {
  const result = form.querySelector("label.result");
  const textarea = result && result.querySelector("textarea");
  if (!textarea) return;
  const sync = () => {
    const chosen = form.querySelector('input[name="outcome"]:checked');
    const succeeded = chosen !== null && chosen.value === "succeeded";
    result.hidden = !succeeded;
    textarea.disabled = !succeeded;
  };
  form.addEventListener("change", sync);
  sync();
}

// A job page that is still moving refreshes itself.
function scheduleRefresh() {
  const seconds = Number(document.body.dataset.refreshSeconds || 0);
  if (seconds > 0) setTimeout(() => window.location.reload(), seconds * 1000);
}

document.addEventListener("DOMContentLoaded", () => {
  document.querySelectorAll("form.resolve").forEach(wireResolveForm);
  scheduleRefresh();
});
