import { test, expect, Browser } from '@playwright/test';
import { openHydrated, sendSigned, eventId, signIn, received, Role } from './helpers';
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { accounts, configPath, databaseUrl } from '../playwright.config';

const binary = process.env.E2E_BINARY ?? './target/debug/replaysafe';

/** Sends an event the test destination refuses once: it ends dead-lettered. */
async function deadEvent(request: any, page: any) {
  const id = eventId('refuse-once');
  await sendSigned(request, 'e2e-standard', id, JSON.stringify({ type: 'invoice.failed' }));
  await expect(async () => {
    await page.goto(`/deliveries?key=${id}`);
    await expect(page.getByTestId('deliveries-table')).toBeVisible();
    const link = page.getByTestId('deliveries-table').getByRole('link', { name: id }).first();
    await link.click();
    await expect(page.getByTestId('event-facts')).toContainText('dead-lettered', { timeout: 2_000 });
  }).toPass({ timeout: 20_000 });
  return { id, url: page.url() };
}

async function signedInPage(browser: Browser, role: Role) {
  const context = await browser.newContext();
  const page = await context.newPage();
  await signIn(page, role);
  return { context, page };
}

test('pages send an anonymous visitor to sign in, and back after', async ({ page }) => {
  await page.goto('/deliveries?outcome=rejected');
  await expect(page).toHaveURL(/\/login\?next=%2Fdeliveries%3Foutcome%3Drejected$/);
  await expect(page.locator('body[data-hydrated="true"]')).toHaveCount(1, { timeout: 15_000 });
  await page.getByLabel('Username').fill(accounts.viewer.username);
  await page.getByLabel('Password').fill('wrong password');
  await page.getByRole('button', { name: 'Sign in' }).click();
  await expect(page.getByRole('alert')).toContainText('wrong username or password');
  await page.getByLabel('Password').fill(accounts.viewer.password);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await expect(page).toHaveURL(/\/deliveries\?outcome=rejected$/);
  await expect(page.getByTestId('whoami')).toContainText('e2e-viewer · viewer');

  await page.getByRole('button', { name: 'Sign out' }).click();
  await expect(page).toHaveURL(/\/login/);
  await page.goto('/overview');
  await expect(page).toHaveURL(/\/login\?next=%2Foverview$/);
});

test('an operator re-delivers a dead event and watches it complete', async ({ page, request }, testInfo) => {
  await signIn(page, 'operator');
  const { id } = await deadEvent(request, page);
  expect((await received(request, `e2e-standard:${id}`)).count).toBe(1);

  await page.getByTestId('redeliver').first().click();
  await expect(page.getByTestId('redeliver-result').first()).toContainText('queued again');
  await expect(async () => {
    await page.reload();
    await expect(page.getByTestId('event-facts')).toContainText('completed', { timeout: 2_000 });
  }).toPass({ timeout: 15_000 });
  const timeline = page.getByTestId('timeline');
  await expect(timeline).toContainText('re-delivery');
  await expect(timeline.locator('li[data-kind="attempt"]').last()).toContainText('HTTP 200');
  expect((await received(request, `e2e-standard:${id}`)).count).toBe(2);
  await page.screenshot({ path: testInfo.outputPath('redelivered.png'), fullPage: true });

  // Once completed, the same button is refused by the dedup layer.
  await page.getByTestId('redeliver').first().click();
  await expect(page.getByTestId('redeliver-result').first()).toContainText('refused: already completed');
  expect((await received(request, `e2e-standard:${id}`)).count).toBe(2);
});

test('two operators press re-deliver at the same moment: the destination gets it once', async ({ browser, page, request }) => {
  await signIn(page, 'operator');
  const { id, url } = await deadEvent(request, page);
  const a = await signedInPage(browser, 'operator');
  const b = await signedInPage(browser, 'admin');
  for (const p of [a.page, b.page]) {
    await openHydrated(p, new URL(url).pathname);
    await expect(p.getByTestId('redeliver').first()).toBeEnabled();
  }
  await Promise.all([a.page.getByTestId('redeliver').first().click(), b.page.getByTestId('redeliver').first().click()]);
  const results = await Promise.all(
    [a.page, b.page].map(async (p) => {
      const result = p.getByTestId('redeliver-result').first();
      await expect(result).not.toBeEmpty();
      return result.innerText();
    }),
  );
  expect(results.filter((r) => r.includes('queued again'))).toHaveLength(1);
  expect(results.filter((r) => /refused: (in progress|already completed)/.test(r))).toHaveLength(1);
  await expect.poll(async () => (await received(request, `e2e-standard:${id}`)).count, { timeout: 15_000 }).toBe(2);
  // And it stays at one re-delivered forward.
  await page.waitForTimeout(2_000);
  expect((await received(request, `e2e-standard:${id}`)).count).toBe(2);
  await a.context.close();
  await b.context.close();
});

test('a viewer sees no re-deliver control, and the server refuses the call anyway', async ({ page, request }) => {
  await signIn(page, 'operator');
  const { url } = await deadEvent(request, page);
  const delivery = await page.getByTestId('timeline').getByRole('link', { name: 'first delivery' }).getAttribute('href');
  const deliveryId = delivery!.split('/').pop();

  await page.getByRole('button', { name: 'Sign out' }).click();
  await signIn(page, 'viewer');
  await openHydrated(page, new URL(url).pathname);
  await expect(page.getByTestId('event-facts')).toContainText('dead-lettered');
  await expect(page.getByTestId('redeliver')).toHaveCount(0);
  await expect(page.getByTestId('force')).toHaveCount(0);

  // The call the button would make, with the viewer's own session.
  const origin = new URL(url).origin;
  const refused = await page.request.post('/api/redeliver', {
    headers: { origin, 'content-type': 'application/x-www-form-urlencoded' },
    data: `delivery_id=${deliveryId}`,
  });
  expect(refused.status()).toBe(403);
  expect(await refused.text()).toContain('operator');
  // Without a session at all: 401; from another site: 403 before anything else.
  const anonymous = await request.post('/api/redeliver', {
    headers: { origin, 'content-type': 'application/x-www-form-urlencoded' },
    data: `delivery_id=${deliveryId}`,
  });
  expect(anonymous.status()).toBe(401);
  const foreign = await page.request.post('/api/redeliver', {
    headers: { origin: 'https://evil.example', 'content-type': 'application/x-www-form-urlencoded' },
    data: `delivery_id=${deliveryId}`,
  });
  expect(foreign.status()).toBe(403);
  expect(await foreign.text()).toContain('cross-site');
});

test('an admin forces a completed event again after typing its key, and the audit log shows it', async ({ page, request }, testInfo) => {
  await signIn(page, 'admin');
  const id = eventId('force');
  await sendSigned(request, 'e2e-standard', id, JSON.stringify({ type: 'ledger.entry' }));
  await expect(async () => {
    await page.goto(`/deliveries?key=${id}`);
    await page.getByTestId('deliveries-table').getByRole('link', { name: id }).first().click();
    await expect(page.getByTestId('event-facts')).toContainText('completed', { timeout: 2_000 });
  }).toPass({ timeout: 20_000 });
  await expect(page.locator('body[data-hydrated="true"]')).toHaveCount(1, { timeout: 15_000 });

  const force = page.getByTestId('force');
  await force.locator('summary').click();
  await force.getByLabel('Event key').fill('not-the-key');
  await force.getByLabel('Reason').fill('ledger rebuilt after incident 42');
  await force.getByRole('button', { name: 'Force re-execution' }).click();
  await expect(force.getByRole('alert')).toContainText("type the event's key exactly");
  expect((await received(request, `e2e-standard:${id}`)).forced).toBe(0);

  await force.getByLabel('Event key').fill(id);
  await force.getByRole('button', { name: 'Force re-execution' }).click();
  await expect(force.getByRole('status')).toContainText('forced');
  await expect.poll(async () => (await received(request, `e2e-standard:${id}`)).forced, { timeout: 15_000 }).toBe(1);
  expect((await received(request, `e2e-standard:${id}`)).count).toBe(2);

  await page.getByRole('link', { name: 'Audit log' }).click();
  const row = page.getByTestId('audit-table').locator('tr[data-action="force"]').first();
  await expect(row).toContainText('e2e-admin');
  await expect(row).toContainText(id);
  await expect(row).toContainText('ledger rebuilt after incident 42');
  await expect(page.getByTestId('audit-table').locator('tr[data-action="login"]').first()).toBeVisible();
  await page.screenshot({ path: testInfo.outputPath('audit.png'), fullPage: true });
});

test('a delivery rejected for its timestamp warns, and only an admin re-delivers it, with a reason', async ({ page, request }) => {
  const id = eventId('late');
  const late = await sendSigned(request, 'e2e-standard', id, JSON.stringify({ type: 'late' }), { ageSecs: 3600 });
  expect(late.status).toBe(401);

  // An operator sees why, and no control.
  await signIn(page, 'operator');
  await openHydrated(page, '/deliveries?source=e2e-standard&outcome=rejected');
  await page.getByTestId('deliveries-table').locator('tbody tr').first().getByTitle('Open this delivery').click();
  await expect(page.getByTestId('past-window')).toContainText('Rejected for its timestamp');
  await expect(page.locator('body[data-hydrated="true"]')).toHaveCount(1, { timeout: 15_000 });
  await expect(page.getByTestId('redeliver-past-window')).toHaveCount(0);
  await expect(page.getByTestId('redeliver')).toHaveCount(0);
  const deliveryPath = new URL(page.url()).pathname;

  // An admin gives the reason and re-delivers it; the audit log says who and why.
  await page.getByRole('button', { name: 'Sign out' }).click();
  await signIn(page, 'admin');
  await openHydrated(page, deliveryPath);
  const box = page.getByTestId('past-window');
  await box.getByLabel('Reason').fill('provider clock skew, ticket 77');
  await box.getByTestId('redeliver-past-window').click();
  await expect(box.getByRole('status')).toContainText('claimed');
  await expect.poll(async () => (await received(request, `e2e-standard:${id}`)).count, { timeout: 15_000 }).toBe(1);
  await page.getByRole('link', { name: 'Audit log' }).click();
  const row = page.getByTestId('audit-table').locator('tr[data-action="redeliver.past_window"]').first();
  await expect(row).toContainText('e2e-admin');
  await expect(row).toContainText('provider clock skew, ticket 77');
});

test('an operator pauses and resumes a source; bulk re-delivery shows progress and outcomes', async ({ page, request }) => {
  await signIn(page, 'operator');
  await openHydrated(page, '/sources');
  const row = page.locator('tr[data-slug="e2e-storm"]');
  await row.getByRole('button', { name: 'Pause e2e-storm' }).click();
  await expect(row).toContainText('paused');
  await expect(row).toContainText('set by an operator');
  await row.getByRole('button', { name: 'Resume e2e-storm' }).click();
  await expect(row).toContainText('active');

  const ids = [eventId('refuse-once-bulk'), eventId('refuse-once-bulk')];
  for (const id of ids) await sendSigned(request, 'e2e-standard', id, '{}');
  await expect(async () => {
    await openHydrated(page, '/dead');
    for (const id of ids) await expect(page.getByTestId('dead-table')).toContainText(id, { timeout: 1_000 });
  }).toPass({ timeout: 20_000 });
  await page.getByLabel('Reason contains').fill('400');
  await page.getByTestId('bulk-redeliver').click();
  await expect(page.getByTestId('bulk-progress')).toContainText('done.', { timeout: 20_000 });
  for (const id of ids) {
    await expect(page.getByTestId('bulk-results').locator('li').filter({ hasText: id })).toContainText('queued again');
    await expect.poll(async () => (await received(request, `e2e-standard:${id}`)).count, { timeout: 15_000 }).toBe(2);
  }
  // The job ran on the server: any page, any process, lists it.
  await openHydrated(page, '/dead');
  const recent = page.getByTestId('recent-jobs');
  await recent.locator('summary').click();
  await expect(recent.locator('tr[data-state="done"]').filter({ hasText: 'e2e-operator' }).first()).toBeVisible();
  await page.getByRole('link', { name: 'Audit log' }).click();
  await expect(page.getByTestId('audit-table').locator('tr[data-action="redeliver.bulk"]').first()).toBeVisible();
  await expect(page.getByTestId('audit-table').locator('tr[data-action="source.pause"]').first()).toContainText('e2e-operator');
});

test('an admin revokes a token made on the command line, and the API refuses it at once', async ({ page, browser, request }) => {
  const name = eventId('e2e-token');
  const token = execFileSync(binary, ['tokens', 'create', '--config', configPath, '--name', name, '--role', 'viewer'], {
    cwd: join(__dirname, '..', '..'),
    env: { ...process.env, DATABASE_URL: databaseUrl, E2E_GITHUB_SECRET: 'unused', RUST_LOG: 'warn' },
  }).toString().trim();
  const bearer = { authorization: `Bearer ${token}` };
  expect((await request.get('/api/v1/sources', { headers: bearer })).status()).toBe(200);

  // A viewer sees no Tokens page in the menu.
  const viewer = await browser.newPage();
  await signIn(viewer, 'viewer');
  await expect(viewer.getByRole('link', { name: 'Tokens' })).toHaveCount(0);
  await viewer.close();

  await signIn(page, 'admin');
  await page.getByRole('link', { name: 'Tokens' }).click();
  const row = page.getByTestId('tokens-table').locator(`tr[data-token="${name}"]`);
  await expect(row).toHaveAttribute('data-state', 'live');
  await expect(row).toContainText(token.slice(0, 11));
  await expect(page.locator('body')).not.toContainText(token);
  await row.getByRole('button', { name: `Revoke ${name}` }).click();
  await expect(page.getByRole('status')).toContainText(`Token ${name} revoked.`);
  await expect(row).toHaveAttribute('data-state', 'revoked');

  const refused = await request.get('/api/v1/sources', { headers: bearer });
  expect(refused.status()).toBe(401);
  expect(await refused.json()).toEqual({ code: 'unauthorized', detail: 'this token was revoked' });
  await page.getByRole('link', { name: 'Audit log' }).click();
  await expect(page.getByTestId('audit-table').locator('tr[data-action="token.revoke"]').first()).toContainText(name);
});

test('the alerts page shows a firing alert; an admin silences it and the audit log says so, a viewer cannot', async ({ page, browser, request }) => {
  const id = eventId('refuse-alerts');
  await sendSigned(request, 'e2e-standard', id, '{}');
  await signIn(page, 'admin');
  const row = page.locator('[data-testid="firing-alerts"] tr[data-rule="dead_letters"][data-source="e2e-standard"]');
  await expect(async () => {
    await openHydrated(page, '/alerts');
    await expect(row).toBeVisible({ timeout: 1_000 });
  }).toPass({ timeout: 30_000 });
  await expect(row).toContainText('dead-lettered in the last 10 minutes');

  const viewer = await browser.newPage();
  await signIn(viewer, 'viewer');
  await openHydrated(viewer, '/alerts');
  await expect(viewer.locator('[data-testid="firing-alerts"] tr[data-rule="dead_letters"]').first()).toBeVisible();
  await expect(viewer.getByRole('button', { name: /^Silence/ })).toHaveCount(0);
  await viewer.close();

  await row.getByLabel('Reason').fill('e2e: a known outage');
  await row.getByRole('button', { name: 'Silence Dead letters on e2e-standard' }).click();
  await expect(page.getByRole('status')).toContainText('dead_letters silenced until');
  const silence = page.getByTestId('silences').locator('tr[data-rule="dead_letters"]');
  await expect(silence).toContainText('e2e: a known outage');
  await silence.getByRole('button', { name: 'End silence' }).click();
  await expect(page.getByTestId('silences')).toHaveCount(0);
  await page.getByRole('link', { name: 'Audit log' }).click();
  await expect(page.getByTestId('audit-table').locator('tr[data-action="alert.silence"]').first()).toContainText('e2e-admin');
});

test('an operator finds a dead destination among dead letters and re-delivers to it alone', async ({ page, request }, testInfo) => {
  await signIn(page, 'operator');
  const id = eventId('fan');
  await sendSigned(request, 'e2e-fanout', id, JSON.stringify({ type: 'invoice.paid' }));
  const key = `e2e-fanout:${id}`;
  // billing refused it (dead at once), crm took it.
  await expect(async () => {
    await page.goto(`/dead?source=e2e-fanout&destination=billing`);
    await expect(page.getByTestId('dead-table').locator('tr', { hasText: id })).toHaveCount(1, { timeout: 2_000 });
  }).toPass({ timeout: 20_000 });
  await expect(page.getByTestId('dead-scope')).toContainText('billing');
  await page.goto(`/dead?source=e2e-fanout&destination=crm`);
  await expect(page.locator('body[data-hydrated="true"]')).toHaveCount(1, { timeout: 15_000 });
  await expect(page.getByText('No dead letters.')).toBeVisible();

  // From every dead letter, the "Dead at" link narrows the page in place,
  // and the bulk form follows the filter.
  await openHydrated(page, `/dead`);
  const bulk = page.getByRole('form', { name: 'Re-deliver dead letters in bulk' });
  await expect(bulk.getByLabel('Dead at destination')).toHaveValue('');
  await page.getByTestId('dead-table').locator('tr', { hasText: id })
    .getByRole('link', { name: 'billing' }).click();
  await expect(page).toHaveURL(/destination=billing/);
  await expect(bulk.getByLabel('Source')).toHaveValue('e2e-fanout');
  await expect(bulk.getByLabel('Dead at destination')).toHaveValue('billing');
  const row = page.getByTestId('dead-table').locator('tr', { hasText: id });
  await row.getByRole('button', { name: 'Re-deliver here' }).click();
  await expect(row.getByTestId('redeliver-result')).toContainText('forwarded to billing (once)');
  await row.getByRole('link', { name: id }).click();
  const lanes = page.getByTestId('dispatches');
  await expect(async () => {
    await page.reload();
    await expect(lanes.locator('tr[data-destination="billing"]')).toContainText('completed', { timeout: 2_000 });
  }).toPass({ timeout: 15_000 });
  await expect(lanes.locator('tr[data-destination="crm"]')).toContainText('completed');
  await page.screenshot({ path: testInfo.outputPath('fanout-redelivered.png'), fullPage: true });
  expect((await received(request, `/refuse-once ${key}`)).count).toBe(2);
  expect((await received(request, key)).count).toBe(1);
});

test('an event that blocks an ordered key is shown as blocking, and an operator dead-letters it so the key goes on', async ({ page, request }) => {
  await signIn(page, 'operator');
  const account = eventId('acct');
  const poison = eventId('poison');
  const after = eventId('after');
  await sendSigned(request, 'e2e-ordered', poison, JSON.stringify({ account }));
  await sendSigned(request, 'e2e-ordered', after, JSON.stringify({ account }));
  // The poison event failed and waits to be retried; the next of its key waits behind it.
  await expect(async () => {
    await page.goto(`/deliveries?key=${poison}`);
    await page.getByTestId('deliveries-table').getByRole('link', { name: poison }).first().click();
    await expect(page.getByTestId('blocking')).toContainText('1 wait behind it', { timeout: 2_000 });
  }).toPass({ timeout: 20_000 });
  const eventUrl = page.url();
  expect((await received(request, `e2e-ordered:${after}`)).count).toBe(0);

  await openHydrated(page, '/sources');
  const blocked = page.getByTestId('blocked-keys').locator('tr').filter({ hasText: poison });
  await expect(blocked).toContainText(account);
  await expect(blocked).toContainText('ledger');

  await openHydrated(page, new URL(eventUrl).pathname);
  const form = page.getByTestId('dead-letter');
  await form.locator('summary').click();
  await form.getByLabel('Reason').fill('the ledger cannot parse this payload');
  await form.getByRole('button', { name: 'Dead-letter' }).click();
  await expect(form.getByRole('status')).toContainText('dead-lettered');
  await expect.poll(async () => (await received(request, `e2e-ordered:${after}`)).count, { timeout: 15_000 }).toBe(1);
  await page.reload();
  await expect(page.getByTestId('event-facts')).toContainText('the ledger cannot parse this payload');

  await page.getByRole('link', { name: 'Audit log' }).click();
  const row = page.getByTestId('audit-table').locator('tr[data-action="dead_letter"]').first();
  await expect(row).toContainText('e2e-operator');
  await expect(row).toContainText(poison);
});
