// Times in the reader's zone (issue 40 item 2), a theme toggle (item 3) and
// charts people can read (item 4). The browser runs in Asia/Tokyo (+09:00,
// no daylight saving: every expected text is computed, not written down).
import { test, expect, Page } from '@playwright/test';
import AxeBuilder from '@axe-core/playwright';
import { openHydrated, signIn, sendSigned, eventId } from './helpers';
import { accounts } from '../playwright.config';

const ZONE = 'Asia/Tokyo';
const pages = ['/overview', '/deliveries', '/dead', '/incidents', '/sources', '/reconciliation', '/alerts', '/audit'];

/** `2026-12-03 14:35:16.123` for an instant, read in `zone`. */
function wall(iso: string, zone: string, ms = true): string {
  const parts = Object.fromEntries(
    new Intl.DateTimeFormat('en-GB', {
      timeZone: zone, year: 'numeric', month: '2-digit', day: '2-digit',
      hour: '2-digit', minute: '2-digit', second: '2-digit', hourCycle: 'h23',
    }).formatToParts(new Date(iso)).map((p) => [p.type, p.value]),
  );
  const text = `${parts.year}-${parts.month}-${parts.day} ${parts.hour}:${parts.minute}:${parts.second}`;
  return ms ? `${text}.${iso.slice(20, 23)}` : text;
}

/** What `main` says, without tooltips. */
async function mainText(page: Page) {
  return (await page.locator('main').innerText()).replace(/\s+/g, ' ');
}

test('times follow the browser zone, kept per user; the UTC toggle changes every page', async ({ browser, request }) => {
  const id = eventId('zoned');
  expect((await sendSigned(request, 'e2e-standard', id, '{"type":"zoned.test"}')).status).toBe(200);
  const context = await browser.newContext({ timezoneId: ZONE });
  const page = await context.newPage();
  await signIn(page, 'operator');
  await openHydrated(page, '/deliveries');
  // The browser reported its zone: the page re-reads in it.
  await expect(page.getByTestId('zone')).toHaveText(ZONE);
  const row = page.getByTestId('deliveries-table').locator('tbody tr').filter({ hasText: id });
  const time = row.locator('time');
  const iso = (await time.getAttribute('datetime'))!;
  await expect(time).toHaveText(wall(iso, ZONE));
  await expect(row.locator('.ago')).toContainText(/just now|s ago|min ago/);
  await expect(page.getByRole('columnheader', { name: `Received (${ZONE})` })).toBeVisible();

  // Kept with the account: the server renders the next page in it, no flash.
  const html = await (await page.request.get('/deliveries')).text();
  expect(html).toContain(`data-zone="${ZONE}"`);
  expect(html).toContain(`>${wall(iso, ZONE)}</time>`);

  // The filter means what its input shows: a minute before it, in Tokyo.
  const minute = 60_000;
  const typed = (t: number) => wall(new Date(t).toISOString(), ZONE, false).slice(0, 16).replace(' ', 'T');
  await page.getByLabel(`From (${ZONE})`).fill(typed(Date.parse(iso) - minute));
  await page.getByRole('button', { name: 'Apply' }).click();
  await expect(page).toHaveURL(/tz=Asia%2FTokyo/);
  await expect(row).toHaveCount(1);
  await page.getByLabel(`From (${ZONE})`).fill(typed(Date.parse(iso) + minute));
  await page.getByRole('button', { name: 'Apply' }).click();
  await expect(page.getByTestId('deliveries-table').locator('tbody tr').filter({ hasText: id })).toHaveCount(0);

  // Every page in the zone, then every page in UTC.
  for (const path of pages) {
    await openHydrated(page, path);
    await expect(page.getByTestId('zone')).toHaveText(ZONE);
    // No heading or label in UTC (texts sent to alert channels say UTC, and may).
    expect(await mainText(page), path).not.toContain('(UTC)');
  }
  await openHydrated(page, '/deliveries');
  await page.getByTestId('utc-toggle').click();
  await expect(page.getByTestId('utc-toggle')).toHaveAttribute('aria-pressed', 'true');
  await expect(page.getByTestId('zone')).toHaveText('UTC');
  await expect(time).toHaveText(wall(iso, 'UTC'));
  await expect(page.getByRole('columnheader', { name: 'Received (UTC)' })).toBeVisible();
  for (const path of pages) {
    await openHydrated(page, path);
    await expect(page.getByTestId('zone')).toHaveText('UTC');
    const text = await mainText(page);
    expect(text, path).not.toContain(ZONE);
    expect(text, path).not.toMatch(/\bJST\b/);
  }
  // The overview says its zone; the audit log's headings too.
  await openHydrated(page, '/overview');
  await expect(page.locator('main')).toContainText(/figures as of \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC/);
  await page.getByTestId('utc-toggle').click();
  await expect(page.locator('main')).toContainText(/figures as of \d{4}-\d\d-\d\d \d\d:\d\d:\d\d JST/);
  await openHydrated(page, '/audit');
  await expect(page.getByRole('columnheader', { name: `When (${ZONE})` })).toBeVisible();

  // Someone else signing in in this tab reads by their own preferences,
  // not the last person's (the page is not loaded again).
  await page.getByTestId('utc-toggle').click();
  await expect(page.getByTestId('zone')).toHaveText('UTC');
  await page.getByRole('button', { name: 'Sign out' }).click();
  await expect(page.getByLabel('Username')).toBeVisible();
  await page.getByLabel('Username').fill(accounts.viewer.username);
  await page.getByLabel('Password').fill(accounts.viewer.password);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await expect(page.getByTestId('whoami')).toContainText('viewer');
  await expect(page.getByTestId('utc-toggle')).toHaveAttribute('aria-pressed', 'false');
  await expect(page.getByTestId('zone')).toHaveText(ZONE);
  await context.close();
});

test('a chosen theme is kept, rendered by the server, and passes the contrast check', async ({ browser }) => {
  // The system asks for light; the person chooses dark.
  const context = await browser.newContext({ colorScheme: 'light', timezoneId: ZONE });
  const page = await context.newPage();
  await signIn(page, 'operator');
  await openHydrated(page, '/overview');
  const background = () => page.evaluate(() => getComputedStyle(document.documentElement).backgroundColor);
  const darkness = async () => (await background()).match(/\d+/g)!.slice(0, 3).map(Number).reduce((a, b) => a + b);
  expect(await darkness()).toBeGreaterThan(600);
  await page.getByTestId('theme').selectOption('dark');
  await expect(page.locator('html')).toHaveAttribute('data-theme', 'dark');
  await expect.poll(darkness).toBeLessThan(150);
  // Kept: the next page arrives dark from the server.
  const html = await (await page.request.get('/deliveries')).text();
  expect(html).toMatch(/<html[^>]*data-theme="dark"/);
  for (const path of ['/overview', '/deliveries', '/incidents']) {
    await openHydrated(page, path);
    expect(await darkness()).toBeLessThan(150);
    const results = await new AxeBuilder({ page }).withRules(['color-contrast']).analyze();
    const failures = results.violations.flatMap((v) => v.nodes.map((n) => `${path}: ${n.target.join(' ')}: ${n.failureSummary}`));
    expect(failures, failures.join('\n')).toEqual([]);
  }
  await page.getByTestId('theme').selectOption('system');
  await expect(page.locator('html')).not.toHaveAttribute('data-theme', /./);
  await expect.poll(darkness).toBeGreaterThan(600);
  await context.close();
});

test('charts have ticks, a readout by pointer and keyboard, and a table of their figures', async ({ browser, request }) => {
  for (let i = 0; i < 3; i++) {
    expect((await sendSigned(request, 'e2e-standard', eventId('charted'), `{"type":"charted.${i}"}`)).status).toBe(200);
  }
  const context = await browser.newContext({ timezoneId: ZONE });
  const page = await context.newPage();
  await signIn(page, 'viewer');
  await openHydrated(page, '/overview');
  const chart = page.locator('figure.chart').filter({ hasText: 'Deliveries per minute' });
  // Ticks: several round values up the y axis, times along the x axis.
  const yLabels = await chart.locator('text.axis[text-anchor="end"]').allTextContents();
  expect(yLabels.length).toBeGreaterThanOrEqual(3);
  expect(yLabels[0]).toBe('0');
  const xLabels = await chart.locator('text.axis[text-anchor="middle"]').allTextContents();
  expect(xLabels.length).toBeGreaterThanOrEqual(5);
  for (const label of xLabels) expect(label).toMatch(/^\d\d:\d\d$/);

  // The table: one row per bucket, a column per series, the same figures
  // (the figures come from rollups a moment behind: wait for these three).
  const toggle = chart.getByTestId('chart-table-toggle');
  await toggle.click();
  await expect(toggle).toHaveAttribute('aria-expanded', 'true');
  const table = chart.getByTestId('chart-table');
  await expect(table.getByRole('columnheader')).toHaveText([`Time (${ZONE})`, 'claimed', 'duplicates', 'rejected']);
  const rows = table.locator('tbody tr');
  expect(await rows.count()).toBeGreaterThanOrEqual(30);
  await expect.poll(async () => {
    const claimed = await table.locator('tbody tr td:first-of-type').allTextContents();
    return claimed.map((c) => Number(c.replace(/,/g, ''))).reduce((a, b) => a + b);
  }, { timeout: 20_000 }).toBeGreaterThanOrEqual(3);

  // The pointer on the newest bar reads it out.
  const readout = chart.getByTestId('chart-readout');
  const moment = async () => (await readout.innerText()).split(':').slice(0, 2).join(':');
  await chart.locator('rect.hit').last().hover();
  await expect(readout).toContainText(/JST: claimed \d+, duplicates \d+, rejected \d+/);
  // The keyboard too: focus reads a moment, left the one before.
  await page.mouse.move(0, 0);
  await chart.locator('.plot').focus();
  await expect(readout).toContainText(/JST: claimed/);
  const focused = await moment();
  await page.keyboard.press('ArrowLeft');
  await expect.poll(moment).not.toBe(focused);
  // It survives the page's refresh (every 5 s), focus and all.
  await page.waitForTimeout(6_000);
  await expect(chart.locator('.plot')).toBeFocused();
  await expect(readout).toContainText(/JST: claimed/);
  await page.keyboard.press('End');
  await expect(readout).toHaveText(/JST: claimed/);
  // The newest row says what the readout says of the newest bucket.
  await expect.poll(async () => {
    await chart.locator('.plot').focus();
    await page.keyboard.press('End');
    const said = (await readout.innerText()).match(/claimed (\d+)/)![1];
    return said === (await rows.last().locator('td').first().innerText());
  }).toBe(true);
  // Still open after a refresh.
  await page.waitForTimeout(6_000);
  await expect(table).toBeVisible();
  await context.close();
});
