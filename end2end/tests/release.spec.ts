// One artifact (issue 39 item 2): the release binary, copied alone into an
// empty directory, serves a dashboard that hydrates, its bundle from memory
// with entity tags. scripts/test builds it (scripts/release --dev) and says
// where in RELEASE_BINARY.
import { test, expect } from '@playwright/test';
import { execFileSync, spawn, ChildProcess } from 'node:child_process';
import { copyFileSync, mkdtempSync, openSync, readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { databaseUrl } from '../playwright.config';

const binary = process.env.RELEASE_BINARY;

async function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const server = createServer();
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

test('the release binary alone serves a working dashboard from an empty directory', async ({ browser, request }) => {
  test.skip(!binary, 'scripts/test runs this with the binary scripts/release builds');
  // It copies a binary of hundreds of MB, starts it on a new database and
  // fetches the dev bundle (27 MB of wasm) three ways before the browser does.
  test.setTimeout(120_000);
  const dir = mkdtempSync(join(tmpdir(), 'replaysafe-release-'));
  copyFileSync(binary!, join(dir, 'replaysafe'));
  expect(readdirSync(dir)).toEqual(['replaysafe']);
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  // The config lives elsewhere: the directory holds the binary and nothing more.
  const configDir = mkdtempSync(join(tmpdir(), 'replaysafe-release-config-'));
  const config = join(configDir, 'replaysafe.toml');
  writeFileSync(config, `listen = "127.0.0.1:${port}"\npublic_url = "${url}"\n`);
  // A database of its own: a server syncs the sources table to its config,
  // and this one's has none (the other tests' server would see its
  // sources marked removed).
  const cluster = databaseUrl.slice(0, databaseUrl.lastIndexOf('/'));
  execFileSync('psql', ['-q', `${cluster}/postgres`, '-c', 'DROP DATABASE IF EXISTS replaysafe_release WITH (FORCE)', '-c', 'CREATE DATABASE replaysafe_release']);
  // Nothing points at a site directory.
  const env: NodeJS.ProcessEnv = { ...process.env, DATABASE_URL: `${cluster}/replaysafe_release`, RUST_LOG: 'warn' };
  delete env.LEPTOS_SITE_ROOT;
  execFileSync('./replaysafe', ['users', 'add', '--config', config, '--username', 'release-admin', '--role', 'admin', '--update'], {
    cwd: dir, env, input: 'release-password-e2e\n', stdio: ['pipe', 'ignore', 'inherit'],
  });
  // Its log is shown only if the test fails.
  const log = join(configDir, 'serve.log');
  const logFd = openSync(log, 'w');
  const server: ChildProcess = spawn('./replaysafe', ['serve', '--config', config], { cwd: dir, env, stdio: ['ignore', logFd, logFd] });
  try {
    await expect.poll(async () => (await request.get(`${url}/readyz`).catch(() => null))?.status(), { timeout: 60_000 }).toBe(200);

    // The bundle, from memory: typed, gzipped for those who take it (the
    // request context asks so and decodes it), tagged, revalidated.
    const wasm = await request.get(`${url}/pkg/replaysafe.wasm`);
    expect(wasm.status()).toBe(200);
    expect(wasm.headers()['content-type']).toBe('application/wasm');
    expect(wasm.headers()['content-encoding']).toBe('gzip');
    expect(wasm.headers()['vary']).toBe('accept-encoding');
    expect(wasm.headers()['cache-control']).toBe('no-cache');
    const etag = wasm.headers()['etag'];
    expect(etag).toMatch(/^"[0-9a-f]{24}-gz"$/);
    const decoded = await wasm.body();
    expect(decoded.subarray(0, 4)).toEqual(Buffer.from([0, 0x61, 0x73, 0x6d]));
    const again = await request.get(`${url}/pkg/replaysafe.wasm`, { headers: { 'if-none-match': etag } });
    expect(again.status()).toBe(304);
    const plain = await request.get(`${url}/pkg/replaysafe.wasm`, { headers: { 'accept-encoding': 'identity' } });
    expect(plain.headers()['content-encoding']).toBeUndefined();
    expect(plain.headers()['etag']).toBe(etag.replace('-gz', ''));
    expect(await plain.body()).toEqual(decoded);
    expect((await request.get(`${url}/pkg/nothing.js`)).status()).toBe(404);

    // A browser signs in and the page hydrates.
    const page = await browser.newPage({ baseURL: url });
    const errors: string[] = [];
    page.on('pageerror', (e) => errors.push(e.message));
    await page.goto('/login');
    await expect(page.locator('body[data-hydrated="true"]')).toHaveCount(1, { timeout: 15_000 });
    await page.getByLabel('Username').fill('release-admin');
    await page.getByLabel('Password').fill('release-password-e2e');
    await page.getByRole('button', { name: 'Sign in' }).click();
    await expect(page.getByRole('heading', { name: 'Overview' })).toBeVisible();
    await expect(page.getByTestId('whoami')).toContainText('release-admin');
    expect(errors).toEqual([]);
    await page.close();
  } catch (e) {
    console.error(`the release binary's log (${log}):\n${readFileSync(log, 'utf8')}`);
    throw e;
  } finally {
    server.kill('SIGTERM');
  }
});
