// Admin work in the browser (issue 40 item 5, issue 35 item 3): tokens made
// and shown once, users added with a one-time password, their role changed
// and disabled, refusals for everyone else, a password change that ends the
// other sessions, and the receive URLs to paste into a provider.
import { test, expect, Browser } from '@playwright/test';
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { openHydrated, eventId, signIn } from './helpers';
import { configPath, databaseUrl } from '../playwright.config';

const binary = process.env.E2E_BINARY ?? './target/debug/replaysafe';

async function signInAs(browser: Browser, username: string, password: string) {
  const context = await browser.newContext();
  const page = await context.newPage();
  await page.goto('/login');
  await expect(page.locator('body[data-hydrated="true"]')).toHaveCount(1, { timeout: 15_000 });
  await page.getByLabel('Username').fill(username);
  await page.getByLabel('Password').fill(password);
  await page.getByRole('button', { name: 'Sign in' }).click();
  return { context, page };
}

test('an admin makes a token in the browser: shown once with its expiry, and it works', async ({ page, request }) => {
  await signIn(page, 'admin');
  await page.getByRole('link', { name: 'Tokens' }).click();
  await expect(page.locator('body[data-hydrated="true"]')).toHaveCount(1);
  const name = eventId('browser-token');
  const form = page.getByRole('form', { name: 'Make a token' });
  await form.getByLabel('Name').fill(name);
  await form.getByLabel('Role').selectOption('operator');
  await form.getByRole('button', { name: 'Make token' }).click();
  const made = page.getByTestId('token-created');
  await expect(made).toContainText(`Token ${name} (operator) made`);
  await expect(made).toContainText(/It expires \d{4}-\d\d-\d\d/);
  const token = (await page.getByTestId('token-value').innerText()).trim();
  expect(token).toMatch(/^rs_[A-Za-z0-9]{40}$/);
  const row = page.getByTestId('tokens-table').locator(`tr[data-token="${name}"]`);
  await expect(row).toHaveAttribute('data-state', 'live');

  const answer = await request.get('/api/v1/sources', { headers: { authorization: `Bearer ${token}` } });
  expect(answer.status()).toBe(200);
  // Shown once: a reload shows its prefix only.
  await openHydrated(page, '/tokens');
  await expect(page.getByTestId('tokens-table').locator(`tr[data-token="${name}"]`)).toContainText(token.slice(0, 11));
  await expect(page.locator('body')).not.toContainText(token);
});

test('an admin adds a user who chooses a password at first sign-in, changes their role and disables them; others cannot', async ({ page, browser }) => {
  await signIn(page, 'admin');
  await page.getByRole('link', { name: 'Users' }).click();
  await expect(page.locator('body[data-hydrated="true"]')).toHaveCount(1);
  const username = eventId('newcomer');
  const add = page.getByRole('form', { name: 'Add a user' });
  await add.getByLabel('Username').fill(username);
  await add.getByLabel('Role').selectOption('operator');
  await add.getByRole('button', { name: 'Add user' }).click();
  await expect(page.getByTestId('one-time-password')).toContainText(`${username} (operator) created`);
  const oneTime = (await page.getByTestId('one-time-password-value').innerText()).trim();
  const row = page.getByTestId('users-table').locator(`tr[data-user="${username}"]`);
  await expect(row).toHaveAttribute('data-state', 'one-time password');

  // The newcomer's first sign-in leads to the account page, and nothing
  // else opens until they choose their own password.
  const newcomer = await signInAs(browser, username, oneTime);
  await expect(newcomer.page).toHaveURL(/\/account$/);
  await expect(newcomer.page.getByTestId('must-change')).toBeVisible();
  await newcomer.page.goto('/deliveries');
  await expect(newcomer.page).toHaveURL(/\/account$/);
  await expect(newcomer.page.locator('body[data-hydrated="true"]')).toHaveCount(1, { timeout: 15_000 });
  const own = 'my very own passphrase';
  await newcomer.page.getByLabel('Current password').fill(oneTime);
  await newcomer.page.getByLabel('New password', { exact: true }).fill(own);
  await newcomer.page.getByLabel('New password again').fill(own);
  await newcomer.page.getByRole('button', { name: 'Change password' }).click();
  await expect(newcomer.page.getByTestId('password-changed')).toBeVisible();
  await openHydrated(newcomer.page, '/deliveries');
  await expect(newcomer.page.getByTestId('whoami')).toContainText(`${username} · operator`);

  // The admin makes them a viewer: their next page says so.
  await openHydrated(page, '/users');
  const userRow = page.getByTestId('users-table').locator(`tr[data-user="${username}"]`);
  await expect(userRow).toHaveAttribute('data-state', 'active');
  await userRow.getByRole('combobox', { name: `Role of ${username}`, exact: true }).selectOption('viewer');
  await userRow.getByRole('button', { name: `Change the role of ${username}` }).click();
  await expect(userRow.getByRole('combobox', { name: `Role of ${username}`, exact: true })).toHaveValue('viewer');
  await openHydrated(newcomer.page, '/overview');
  await expect(newcomer.page.getByTestId('whoami')).toContainText(`${username} · viewer`);
  // A viewer has no Users page, and the server refuses its calls anyway.
  await expect(newcomer.page.getByRole('link', { name: 'Users' })).toHaveCount(0);
  await openHydrated(newcomer.page, '/users');
  await expect(newcomer.page.getByRole('alert')).toContainText('admin');
  const origin = new URL(newcomer.page.url()).origin;
  const refused = await newcomer.page.request.post('/api/user-add', {
    headers: { origin, 'content-type': 'application/x-www-form-urlencoded' },
    data: 'username=intruder&role=admin',
  });
  expect(refused.status()).toBe(403);

  // Disabled: their session ends at once.
  await userRow.getByRole('button', { name: `Disable ${username}` }).click();
  await expect(userRow).toHaveAttribute('data-state', 'disabled');
  await newcomer.page.goto('/overview');
  await expect(newcomer.page).toHaveURL(/\/login/);
  await newcomer.context.close();

  // The admin cannot disable themselves (no button), and the audit log has it all.
  const me = page.getByTestId('users-table').locator('tr[data-user="e2e-admin"]');
  await expect(me.getByRole('button', { name: 'Disable e2e-admin' })).toHaveCount(0);
  await page.getByRole('link', { name: 'Audit log' }).click();
  for (const action of ['user.add', 'user.role', 'user.disable', 'user.password']) {
    await expect(page.getByTestId('audit-table').locator(`tr[data-action="${action}"]`).first()).toBeVisible();
  }
});

test('changing your password ends your other sessions and keeps this one', async ({ browser }) => {
  const username = eventId('two-tabs');
  const password = 'first password of two-tabs';
  execFileSync(binary, ['users', 'add', '--config', configPath, '--username', username, '--role', 'viewer'], {
    cwd: join(__dirname, '..', '..'),
    input: `${password}\n`,
    env: { ...process.env, DATABASE_URL: databaseUrl, E2E_GITHUB_SECRET: 'unused', RUST_LOG: 'warn' },
  });
  const here = await signInAs(browser, username, password);
  const there = await signInAs(browser, username, password);
  for (const s of [here, there]) await expect(s.page.getByTestId('whoami')).toContainText(username);

  await here.page.getByTestId('whoami').click();
  await expect(here.page).toHaveURL(/\/account$/);
  await expect(here.page.locator('body[data-hydrated="true"]')).toHaveCount(1, { timeout: 15_000 });
  const changed = 'second password of two-tabs';
  await here.page.getByLabel('Current password').fill('not the password');
  await here.page.getByLabel('New password', { exact: true }).fill(changed);
  await here.page.getByLabel('New password again').fill(changed);
  await here.page.getByRole('button', { name: 'Change password' }).click();
  await expect(here.page.getByRole('alert')).toContainText('current password');
  await here.page.getByLabel('Current password').fill(password);
  await here.page.getByRole('button', { name: 'Change password' }).click();
  await expect(here.page.getByTestId('password-changed')).toBeVisible();

  await there.page.goto('/overview');
  await expect(there.page).toHaveURL(/\/login\?next=%2Foverview$/);
  await openHydrated(here.page, '/overview');
  await expect(here.page.getByTestId('whoami')).toContainText(username);
  await here.context.close();
  await there.context.close();
});

test('the Sources page gives each receive URL with a copy button and what to paste where', async ({ browser, baseURL }) => {
  const context = await browser.newContext({ permissions: ['clipboard-read', 'clipboard-write'] });
  const page = await context.newPage();
  await signIn(page, 'viewer');
  await openHydrated(page, '/sources');
  const entry = page.getByTestId('receive-urls').locator('dd[data-slug="e2e-standard"]');
  await expect(entry.getByRole('textbox', { name: 'Receive URL of e2e-standard' })).toHaveValue(`${baseURL}/hooks/e2e-standard`);
  await expect(entry).toContainText('signing secret');
  await entry.getByRole('button', { name: 'Copy the receive URL of e2e-standard' }).click();
  await expect(entry.getByTestId('copied')).toHaveText('copied');
  expect(await page.evaluate(() => navigator.clipboard.readText())).toBe(`${baseURL}/hooks/e2e-standard`);
  await context.close();
});
