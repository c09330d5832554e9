// Admin calls (restart, plugin activation): a dialog that says what will happen, asks for the admin key and waits
// for confirmation; then the call with `Authorization: Bearer <key>`. The key stays in this tab only when asked to
// (sessionStorage) and is forgotten as soon as the daemon refuses it.

const KEY_STORE = "caovan.adminKey";

const dialog = document.getElementById("admin-dialog");
const title = document.getElementById("admin-title");
const text = document.getElementById("admin-text");
const keyInput = document.getElementById("admin-key");
const remember = document.getElementById("admin-remember");
const confirmButton = document.getElementById("admin-confirm");
const result = document.getElementById("admin-result");

/** Ask for the key and a confirmation; resolves to the key ("" when none is needed) or null when cancelled. */
function askKey(heading, explanation, confirmLabel) {
  title.textContent = heading;
  text.textContent = explanation;
  confirmButton.textContent = confirmLabel;
  const stored = sessionStorage.getItem(KEY_STORE);
  keyInput.value = stored ?? "";
  remember.checked = stored !== null;
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => {
      if (dialog.returnValue !== "confirm") return resolve(null);
      const key = keyInput.value.trim();
      if (remember.checked && key) sessionStorage.setItem(KEY_STORE, key);
      else sessionStorage.removeItem(KEY_STORE);
      keyInput.value = "";
      resolve(key);
    }, { once: true });
    dialog.returnValue = "";
    dialog.showModal();
    keyInput.focus();
  });
}

function show(ok, message) {
  result.dataset.ok = String(ok);
  result.textContent = message;
}

/**
 * Confirm, then POST `path` with the admin key. Returns true when the daemon accepted the call.
 * @param {{path: string, heading: string, explanation: string, confirmLabel: string, what: string}} action
 */
export async function adminCall(action) {
  const key = await askKey(action.heading, action.explanation, action.confirmLabel);
  if (key === null) {
    show(false, `${action.what}: cancelled`);
    return false;
  }
  const headers = { "Content-Type": "application/json" };
  if (key) headers.Authorization = `Bearer ${key}`;
  let response;
  try {
    response = await fetch(action.path, {
      method: "POST", headers, body: JSON.stringify({ reason: `${action.what} from the dashboard` }),
    });
  } catch (error) {
    show(false, `${action.what}: the daemon did not answer (${error.message}); is it running?`);
    return false;
  }
  const body = await response.json().catch(() => ({}));
  if (response.status === 401) {
    sessionStorage.removeItem(KEY_STORE);
    show(false, `${action.what} refused: the admin key is wrong or missing (401). Ask whoever runs the daemon ` +
      "for a key from security.admin_keys.");
    return false;
  }
  if (!response.ok) {
    const detail = body.message ?? body.detail ?? response.statusText;
    const said = typeof detail === "string" ? detail : JSON.stringify(detail);
    show(false, `${action.what} not done (${response.status}): ${said}`);
    return false;
  }
  show(true, `${action.what} accepted: ${body.message ?? "ok"} (state ${body.state ?? "?"})`);
  return true;
}
