import { test, expect } from '@playwright/test';
import { openHydrated, sendSigned, eventId, signIn } from './helpers';

// Every page needs a session: the on-call viewer reads them all.
test.beforeEach(async ({ page }) => { await signIn(page, 'viewer'); });

// Figures come from per-minute rollups folded every few seconds.
const ROLLUP = { timeout: 20_000 };

test('the overview shows figures, charts and per-source rows from signed deliveries', async ({ page, request }, testInfo) => {
  const body = JSON.stringify({ type: 'invoice.paid', amount: 42 });
  // A source of its own, so the figures are exactly these deliveries.
  for (let i = 0; i < 4; i++) {
    const id = eventId('ov');
    expect((await sendSigned(request, 'e2e-overview', id, body)).outcome).toBe('claimed');
    expect((await sendSigned(request, 'e2e-overview', id, body)).status).toBe(200);
  }
  expect((await sendSigned(request, 'e2e-overview', eventId('ov'), body, { wrongSecret: true })).status).toBe(401);

  const errors = await openHydrated(page, '/overview?source=e2e-overview');
  await expect(page.getByRole('heading', { level: 1, name: 'Overview' })).toBeVisible();
  // The page refreshes itself: no reload needed for the rollup to show.
  await expect(page.getByTestId('stat-deliveries').locator('.stat-value')).toHaveText('9', ROLLUP);
  await expect(page.getByTestId('stat-deliveries')).toContainText('4 claimed, 1 rejected');
  await expect(page.getByTestId('stat-signatures').locator('.stat-value')).toHaveText('1');
  await expect(page.getByTestId('stat-duplicates').locator('.stat-value')).toHaveText('50.0%');
  await expect(page.getByTestId('stat-ack').locator('.stat-value')).toContainText('ms');
  // The worker forwards all four: end-to-end latency and attempts appear.
  await expect(page.getByTestId('stat-attempts')).toContainText('4 attempts, 0 failed', ROLLUP);
  await expect(page.getByTestId('stat-e2e').locator('.stat-value')).toContainText('ms');

  // Charts are SVG with a summary for screen readers and a bar per minute with data.
  const chart = page.locator('figure.chart').filter({ hasText: 'Deliveries per minute' });
  await expect(chart.locator('svg[role="img"]')).toHaveAttribute('aria-label', /peak/);
  expect(await chart.locator('rect').count()).toBeGreaterThan(0);

  const row = page.getByTestId('per-source').locator('tr[data-slug="e2e-overview"]');
  await expect(row.locator('td').first()).toHaveText('9');
  await expect(row.getByTestId('backlog-split')).toContainText(/\d+ due, \d+ waiting, \d+ in flight/);
  await page.getByRole('link', { name: 'last 7 days' }).click();
  await expect(page).toHaveURL(/window=week/);
  await expect(page.getByRole('link', { name: 'last 7 days' })).toHaveAttribute('aria-current', 'page');
  await page.screenshot({ path: testInfo.outputPath('overview.png'), fullPage: true });
  expect(errors).toEqual([]);
});

test('a duplicate storm raises the banner, and a quiet source shows none', async ({ page, request }) => {
  const body = JSON.stringify({ type: 'order.created' });
  const ids = Array.from({ length: 8 }, () => eventId('storm'));
  for (const id of ids) await sendSigned(request, 'e2e-storm', id, body);
  await openHydrated(page, '/overview?source=e2e-storm');
  await expect(page.getByTestId('stat-deliveries').locator('.stat-value')).toHaveText('8', ROLLUP);
  await expect(page.getByTestId('duplicate-storm')).toHaveCount(0);

  // A provider retrying everything at once: 4 copies of each event.
  await Promise.all(ids.flatMap((id) => [1, 2, 3, 4].map(() => sendSigned(request, 'e2e-storm', id, body))));
  const banner = page.getByTestId('duplicate-storm');
  await expect(banner).toBeVisible(ROLLUP);
  await expect(banner).toHaveAttribute('role', 'alert');
  await expect(banner).toContainText('e2e-storm');
  await expect(banner).toContainText('80.0%');
  await banner.getByRole('link', { name: 'See its deliveries' }).click();
  await expect(page).toHaveURL(/\/deliveries\?source=e2e-storm/);
});

test('deliveries: newest first, filters narrow the list, a new delivery appears live', async ({ page, request }, testInfo) => {
  const body = JSON.stringify({ type: 'charge.succeeded' });
  const first = eventId('list');
  await sendSigned(request, 'e2e-standard', first, body);
  await sendSigned(request, 'e2e-standard', first, body);
  await sendSigned(request, 'e2e-standard', eventId('list'), body, { wrongSecret: true });

  const errors = await openHydrated(page, '/deliveries');
  const table = page.getByTestId('deliveries-table');
  await expect(table.locator('tbody tr').first()).toBeVisible();

  // Live: a delivery sent now shows without a reload.
  const live = eventId('live');
  await sendSigned(request, 'e2e-standard', live, body);
  const liveRow = table.locator('tbody tr').filter({ hasText: live });
  await expect(liveRow).toHaveCount(1, { timeout: 10_000 });
  await expect(table.locator('tbody tr').first()).toContainText(live);
  await expect(liveRow).toContainText('claimed');
  await expect(page.getByTestId('live-status')).toContainText('new since this page opened');

  // Outcome filter: only rejections, in words.
  await page.getByLabel('Outcome').selectOption('rejected');
  await page.getByRole('button', { name: 'Apply' }).click();
  await expect(page).toHaveURL(/outcome=rejected/);
  const rejected = page.getByTestId('deliveries-table').locator('tbody tr');
  await expect(rejected.first()).toContainText('rejected: bad signature');
  for (const text of await rejected.allInnerTexts()) expect(text).toContain('rejected');

  // Key filter, in the form the application sees in Idempotency-Key.
  await openHydrated(page, `/deliveries?key=${encodeURIComponent(`e2e-standard:${first}`)}`);
  const byKey = page.getByTestId('deliveries-table').locator('tbody tr');
  await expect(byKey).toHaveCount(2);
  // The copy came while the first was queued or after it completed.
  await expect(byKey.nth(0)).toContainText(/in-progress|already completed/);
  await expect(byKey.nth(1)).toContainText('claimed');

  // A filter the server cannot read is explained, not a crash.
  await openHydrated(page, '/deliveries?status=abc');
  await expect(page.getByRole('alert')).toContainText('expected a code like 409');

  // Keyboard: the filter form is reachable and usable without a mouse.
  await openHydrated(page, '/deliveries');
  await page.getByLabel('Key or provider id').focus();
  await page.keyboard.type(first);
  await page.keyboard.press('Enter');
  await expect(page).toHaveURL(new RegExp(`key=${first}`));
  await expect(page.getByTestId('deliveries-table').locator('tbody tr')).toHaveCount(2);
  await page.screenshot({ path: testInfo.outputPath('deliveries.png'), fullPage: true });
  expect(errors).toEqual([]);
});

test('an event timeline shows deliveries and attempts, and a hostile payload stays text', async ({ page, request }, testInfo) => {
  const id = eventId('xss');
  const payload = JSON.stringify({
    note: '<script>window.__xss = 1</script>',
    img: '<img src=x onerror=window.__xss=2>',
  });
  await sendSigned(request, 'e2e-standard', id, payload);
  await sendSigned(request, 'e2e-standard', id, payload);
  let dialogs = 0;
  page.on('dialog', async (d) => { dialogs++; await d.dismiss(); });

  await openHydrated(page, `/deliveries?key=${id}`);
  await page.getByTestId('deliveries-table').locator('tbody tr').last().getByRole('link', { name: id }).click();
  await expect(page).toHaveURL(/\/events\/\d+$/);
  await expect(page.getByRole('heading', { level: 1 })).toContainText(id);
  const timeline = page.getByTestId('timeline');
  await expect(timeline.locator('li[data-kind="delivery"]')).toHaveCount(2);
  await expect(timeline).toContainText('first delivery');
  // The worker forwards it: an attempt with the destination's answer appears.
  await expect(async () => {
    await page.reload();
    await expect(page.getByTestId('timeline').locator('li[data-kind="attempt"]')).toContainText('HTTP 200');
  }).toPass({ timeout: 15_000 });
  await expect(page.getByTestId('event-facts')).toContainText('completed');
  await expect(page.getByTestId('event-facts')).toContainText(`e2e-standard:${id}`);

  const shown = page.getByTestId('payload');
  await expect(shown).toContainText('<script>window.__xss = 1</script>');
  await expect(shown).toContainText('<img src=x onerror=window.__xss=2>');
  // Keys stay in the order the provider sent them.
  await expect(shown).toHaveText(/"note"[\s\S]*"img"/);
  expect(await shown.locator('script, img').count()).toBe(0);
  expect(await page.evaluate(() => (window as any).__xss)).toBeUndefined();
  expect(dialogs).toBe(0);
  await expect(page.getByTestId('headers')).toContainText('webhook-signature');
  await page.screenshot({ path: testInfo.outputPath('event.png'), fullPage: true });
});

test('dead letters list refused events with their reason and lead to the timeline', async ({ page, request }, testInfo) => {
  const id = eventId('refuse');
  await sendSigned(request, 'e2e-standard', id, JSON.stringify({ type: 'bad.event' }));
  await openHydrated(page, '/dead');
  await expect(async () => {
    await page.reload();
    await expect(page.getByTestId('dead-table').locator('tr').filter({ hasText: id })).toHaveCount(1);
  }).toPass({ timeout: 15_000 });
  const row = page.getByTestId('dead-table').locator('tr').filter({ hasText: id });
  await expect(row).toContainText('destination refused the event with 400');
  await row.getByRole('link', { name: id }).click();
  await expect(page.getByTestId('event-facts')).toContainText('dead-lettered');
  await expect(page.getByTestId('timeline').locator('li[data-kind="attempt"]')).toContainText('HTTP 400');
  await page.goto('/dead');
  await page.screenshot({ path: testInfo.outputPath('dead-letters.png'), fullPage: true });

  // The overview warns of the dead letters (the alert the evaluator fired).
  await openHydrated(page, '/overview?source=e2e-standard');
  await expect(page.getByTestId('dead-letters')).toContainText('e2e-standard', { timeout: 20_000 });
});

test('the sources page shows each source\'s figures', async ({ page, request }, testInfo) => {
  await sendSigned(request, 'e2e-standard', eventId('src'), '{}');
  await openHydrated(page, '/sources');
  const row = page.locator('tr[data-slug="e2e-standard"]');
  await expect(async () => {
    await page.reload();
    expect(Number((await row.locator('td').nth(5).innerText()).replace(/,/g, ''))).toBeGreaterThan(0);
  }).toPass({ timeout: 15_000 });
  await expect(row).toContainText('attempt timeout');
  await page.screenshot({ path: testInfo.outputPath('sources.png'), fullPage: true });
});
