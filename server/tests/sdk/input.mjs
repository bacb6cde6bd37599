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

// The scripts' one driver: stdin a JSON array, `answer(item)` for each (an
// object checked already), stdout the answers in order; any error: a message
// on stderr naming the item, nothing on stdout, exit 1.
export function serve(script, label, answer) {
  async function main() {
    const chunks = [];
    for await (const c of process.stdin) chunks.push(c);
    let input;
    try {
      input = JSON.parse(Buffer.concat(chunks).toString("utf8"));
    } catch (e) {
      throw new InputError(`stdin is not valid JSON: ${e.message}`);
    }
    if (!Array.isArray(input)) throw new InputError("stdin must be a JSON array of requests");
    const out = [];
    for (const [i, item] of input.entries()) {
      const named = item && typeof item === "object" ? label(item) : "";
      const where = `item ${i}${named ? ` (${named})` : ""}`;
      try {
        if (!item || typeof item !== "object" || Array.isArray(item)) fail("must be an object");
        out.push(await answer(item));
      } catch (e) {
        const err = new InputError(`${where}: ${e?.message ?? e}`);
        err.code = e?.code;
        throw err;
      }
    }
    process.stdout.write(JSON.stringify(out) + "\n");
  }
  main().catch((e) => {
    process.stderr.write(`${script}: ${e instanceof InputError ? e.message : e.stack || e}\n`);
    if (e?.code === "ERR_MODULE_NOT_FOUND") process.stderr.write(`${script}: run setup.sh in this folder first\n`);
    process.exitCode = 1;
  });
}
