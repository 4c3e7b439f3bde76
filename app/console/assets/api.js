// The public API, as curl uses it: a bearer credential, JSON in, JSON or server-sent events
// out, RFC 9457 problems on failure. The credential lives in this tab's session storage only:
// never in a URL, a cookie or local storage.

const ROOT = document.querySelector('meta[name="toolgate-root"]')?.content || "";
const STORE_KEY = "toolgate.console.credential";

export const session = {
  get() {
    try {
      return JSON.parse(sessionStorage.getItem(STORE_KEY) || "null");
    } catch {
      return null;
    }
  },
  save(credential) {
    sessionStorage.setItem(STORE_KEY, JSON.stringify(credential));
  },
  clear() {
    sessionStorage.removeItem(STORE_KEY);
  },
};

export class ApiError extends Error {
  constructor(status, problem) {
    super(problem?.detail || problem?.title || `HTTP ${status}`);
    this.status = status;
    this.problem = problem || {};
  }

  /** "detail" plus each "path: message" of the problem's errors. */
  lines() {
    const errors = Array.isArray(this.problem.errors) ? this.problem.errors : [];
    return [this.message, ...errors.map((e) => `${e.path || "$"}: ${e.message || ""}`)];
  }
}

function headers(key, body) {
  const result = { Accept: "application/json" };
  const credential = key || session.get()?.key;
  if (credential) result.Authorization = `Bearer ${credential}`;
  if (body !== undefined) result["Content-Type"] = "application/json";
  return result;
}

async function failure(response) {
  let problem = null;
  try {
    problem = await response.json();
  } catch {
    problem = { detail: `HTTP ${response.status} ${response.statusText}` };
  }
  return new ApiError(response.status, problem);
}

/** One request; the parsed JSON answer (null for 204), or an ApiError. */
export async function api(method, path, body, { key } = {}) {
  let response;
  try {
    response = await fetch(ROOT + path, {
      method,
      headers: headers(key, body),
      body: body === undefined ? undefined : JSON.stringify(body),
      credentials: "omit",
      cache: "no-store",
    });
  } catch (error) {
    throw new ApiError(0, { detail: `The service cannot be reached (${error.message}).` });
  }
  if (!response.ok) throw await failure(response);
  if (response.status === 204) return null;
  return response.json();
}

/** POST `body` and yield each server-sent event as {event, data}, data parsed as JSON. */
export async function* stream(path, body, { signal } = {}) {
  const response = await fetch(ROOT + path, {
    method: "POST",
    headers: { ...headers(undefined, body), Accept: "text/event-stream" },
    body: JSON.stringify(body),
    credentials: "omit",
    cache: "no-store",
    signal,
  });
  if (!response.ok) throw await failure(response);
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += value.replace(/\r\n/g, "\n");
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const event = parseEvent(block);
      if (event) yield event;
    }
  }
}

function parseEvent(block) {
  let event = "message";
  const data = [];
  for (const line of block.split("\n")) {
    if (line.startsWith(":")) continue; // a keep-alive comment
    const colon = line.indexOf(":");
    const name = colon < 0 ? line : line.slice(0, colon);
    const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
    if (name === "event") event = value;
    else if (name === "data") data.push(value);
  }
  if (!data.length) return null;
  const text = data.join("\n");
  try {
    return { event, data: JSON.parse(text) };
  } catch {
    return { event, data: text };
  }
}

/** Whether the service has a route (for pages that exist only on newer services). */
export async function exists(path) {
  try {
    await api("GET", path);
    return true;
  } catch (error) {
    return !(error instanceof ApiError) || ![404, 405].includes(error.status);
  }
}
