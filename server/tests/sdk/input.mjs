// Reading the signers' JSON requests, for sign.mjs and presets.mjs: a
// missing or wrong field is the caller's error (exit 1), never a guess.

export class InputError extends Error {}

export const fail = (msg) => {
  throw new InputError(msg);
};

export function str(item, key, { required = true, nonEmpty = true } = {}) {
  const v = item[key];
  if (v === undefined || v === null) {
    if (required) fail(`"${key}" is required`);
    return undefined;
  }
  if (typeof v !== "string") fail(`"${key}" must be a string`);
  if (nonEmpty && v === "") fail(`"${key}" must not be empty`);
  return v;
}

// Unix seconds. Absent: now. Accepts an integer or a string of digits.
export function timestamp(item) {
  const v = item.timestamp;
  if (v === undefined || v === null) return Math.floor(Date.now() / 1000);
  const n = typeof v === "string" && /^[0-9]+$/.test(v) ? Number(v) : v;
  if (!Number.isSafeInteger(n) || n <= 0) fail(`"timestamp" must be a positive integer of unix SECONDS, got ${JSON.stringify(v)}`);
  if (n > 1e11) fail(`"timestamp" ${n} looks like milliseconds; give unix SECONDS`);
  return n;
}
